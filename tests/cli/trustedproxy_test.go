package cli_test

import (
	"bytes"
	"context"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/knowledgefs/kfsdb/cmd/kfsdb/cli"
	"github.com/knowledgefs/kfsdb/tests/pgtest"
	"github.com/knowledgefs/kfsdb/tests/testfactory"
)

// TestConsoleRefusesOpenTokenFile: a token file others may read is
// refused before anything starts, naming its mode and the fix (issue 39:
// a 0644 token file was accepted).
func TestConsoleRefusesOpenTokenFile(t *testing.T) {
	t.Parallel()
	file := filepath.Join(t.TempDir(), "token")
	require.NoError(t, os.WriteFile(file, []byte(strongToken+"\n"), 0o600))
	require.NoError(t, os.Chmod(file, 0o644))
	var out, stderr bytes.Buffer
	code := cli.Main(t.Context(), []string{"console", "--auth-token-file", file, "--database-url", "postgres://u@h/db"}, &out, &stderr, envWith(""))
	require.Equal(t, 2, code, stderr.String())
	require.Contains(t, stderr.String(), "mode 0644")
	require.Contains(t, stderr.String(), "chmod 600 "+file)
}

// TestConsoleTrustedProxy: an over-broad --trusted-proxy is a usage error
// (issue 39: a /1 was accepted), and at start the console says what it
// trusts, warning that loopback trusts every local process.
func TestConsoleTrustedProxy(t *testing.T) {
	t.Parallel()
	for _, p := range []string{"0.0.0.0/1", "128.0.0.0/1", "10.0.0.0/7", "::/16"} {
		var out, stderr bytes.Buffer
		code := cli.Main(t.Context(), []string{"console", "--trusted-proxy", p, "--database-url", "postgres://u@h/db"}, &out, &stderr, envWith(""))
		require.Equal(t, 2, code, p)
		require.Contains(t, stderr.String(), "name the proxy's address or subnet", p)
	}

	db := pgtest.NewDB(t)
	ctx, cancel := context.WithCancel(t.Context())
	var out testfactory.SyncBuffer
	done := make(chan error, 1)
	go func() {
		done <- cli.Console(ctx, &cli.ConsoleOpts{DatabaseURL: db.URL, Listen: "127.0.0.1:0", Out: &out,
			TrustedProxies: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/24"), netip.MustParsePrefix("127.0.0.1/32")}})
	}()
	require.Eventually(t, func() bool { return strings.Contains(out.String(), "log in once at") }, 10*time.Second, 10*time.Millisecond, out.String())
	cancel()
	require.NoError(t, <-done)
	require.Contains(t, out.String(), "trusting Forwarded and X-Forwarded-* from 10.0.0.0/24 (256 addresses)\n")
	require.Contains(t, out.String(), "trusting Forwarded and X-Forwarded-* from 127.0.0.1 (1 address)\n")
	require.Contains(t, out.String(), "warning: --trusted-proxy 127.0.0.1 trusts every process on this host")
}
