package cli_test

import (
	"bytes"
	"context"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/knowledgefs/kfsdb/cmd/kfsdb/cli"
	"github.com/knowledgefs/kfsdb/tests/pgtest"
	"github.com/knowledgefs/kfsdb/tests/testfactory"
)

// TestConsoleRefusesNonLoopbackWithoutToken: the check happens before any
// listen or connect, and is a usage error (exit 2).
func TestConsoleRefusesNonLoopbackWithoutToken(t *testing.T) {
	t.Parallel()
	for _, listen := range []string{"0.0.0.0:8080", ":8080", "192.0.2.1:8080", "[::]:8080", "example.com:8080"} {
		var stdout, stderr bytes.Buffer
		code := cli.Main(t.Context(), []string{"console", "--listen", listen, "--database-url", "postgres://u@h/db"}, &stdout, &stderr, envWith(""))
		require.Equal(t, 2, code, listen)
		require.Contains(t, stderr.String(), "an auth token is required", listen)
	}
	var out bytes.Buffer
	for name, tc := range map[string]struct {
		opts    cli.ConsoleOpts
		wantErr string
	}{
		"LoopbackWithoutToken":  {cli.ConsoleOpts{DatabaseURL: "postgres://u@h/db", Listen: "127.0.0.1:0", Out: &out}, ""},
		"DefaultListen":         {cli.ConsoleOpts{DatabaseURL: "postgres://u@h/db", Out: &out}, ""},
		"LocalhostWithoutToken": {cli.ConsoleOpts{DatabaseURL: "postgres://u@h/db", Listen: "localhost:8080", Out: &out}, ""},
		"IPv6LoopbackNoToken":   {cli.ConsoleOpts{DatabaseURL: "postgres://u@h/db", Listen: "[::1]:8080", Out: &out}, ""},
		"AnyInterfaceWithToken": {cli.ConsoleOpts{DatabaseURL: "postgres://u@h/db", Listen: "0.0.0.0:8080", AuthToken: strongToken, Out: &out}, ""},
		"WeakToken":             {cli.ConsoleOpts{DatabaseURL: "postgres://u@h/db", Listen: "0.0.0.0:8080", AuthToken: "t", Out: &out}, "at least 24 characters"},
		"AnyInterfaceNoToken":   {cli.ConsoleOpts{DatabaseURL: "postgres://u@h/db", Listen: "0.0.0.0:8080", Out: &out}, "auth token is required"},
		"ListenWithoutPort":     {cli.ConsoleOpts{DatabaseURL: "postgres://u@h/db", Listen: "127.0.0.1", Out: &out}, "not host:port"},
		"MissingURL":            {cli.ConsoleOpts{Out: &out}, "DatabaseURL is required"},
		"MissingOut":            {cli.ConsoleOpts{DatabaseURL: "postgres://u@h/db"}, "Out is required"},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			requireValidateErr(t, tc.opts.Validate(), tc.wantErr)
		})
	}
	// The token may come from the environment or a file, never argv.
	var stderr bytes.Buffer
	env := func(k string) string {
		return map[string]string{cli.EnvConsoleToken: strongToken}[k]
	}
	code := cli.Main(t.Context(), []string{"console", "--listen", "0.0.0.0:8080"}, &out, &stderr, env)
	require.Equal(t, 2, code)
	require.Contains(t, stderr.String(), "DatabaseURL is required", "the token was taken from the environment")
	file := filepath.Join(t.TempDir(), "token")
	require.NoError(t, os.WriteFile(file, []byte(strongToken+"\n"), 0o600))
	stderr.Reset()
	code = cli.Main(t.Context(), []string{"console", "--listen", "0.0.0.0:8080", "--auth-token-file", file}, &out, &stderr, envWith(""))
	require.Equal(t, 2, code)
	require.Contains(t, stderr.String(), "DatabaseURL is required", "the token was taken from the file")
	stderr.Reset()
	code = cli.Main(t.Context(), []string{"console", "--auth-token", strongToken, "--database-url", "postgres://u@h/db"}, &out, &stderr, envWith(""))
	require.Equal(t, 2, code)
	require.Contains(t, stderr.String(), "--auth-token is refused")
}

// strongToken passes httpguard.CheckToken.
const strongToken = "I7XsDxIh75osNbTptPIvxs5RADDVvyA0uvatAeHVOEc"

// TestConsoleServesUntilCanceled runs the command on a real database and a
// real listener: it prints its address, serves the overview, and returns
// nil when ctx ends.
func TestConsoleServesUntilCanceled(t *testing.T) {
	t.Parallel()
	db := pgtest.NewDB(t)
	ctx, cancel := context.WithCancel(t.Context())
	var out, audit testfactory.SyncBuffer
	done := make(chan error, 1)
	go func() {
		done <- cli.Console(ctx, &cli.ConsoleOpts{DatabaseURL: db.URL, Listen: "127.0.0.1:0", ReadOnly: true, Out: &out, Audit: &audit})
	}()
	// Without a token it makes one and prints a one-time login link.
	link := regexp.MustCompile(`log in once at (http://127\.0\.0\.1:\d+)(/login\?once=\S+)`)
	var m []string
	require.Eventually(t, func() bool {
		m = link.FindStringSubmatch(out.String())
		return m != nil
	}, 2*time.Minute, 10*time.Millisecond, "no login link printed: %s", out.String())
	res, err := http.Get(m[1] + "/")
	require.NoError(t, err)
	res.Body.Close()
	require.Equal(t, http.StatusUnauthorized, res.StatusCode, "no page without a login")
	u, err := url.Parse(m[2])
	require.NoError(t, err)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, m[1]+"/login", strings.NewReader(u.RawQuery))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Origin", m[1])
	noRedirects := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	res, err = noRedirects.Do(req)
	require.NoError(t, err)
	res.Body.Close()
	require.Equal(t, http.StatusSeeOther, res.StatusCode)
	require.NotEmpty(t, res.Header.Get("Set-Cookie"), "the link logged in")
	// The login's audit line goes to the output and to the --audit-file.
	require.Regexp(t, `msg=audit .* action=login .* result=applied `, audit.String())
	require.Contains(t, out.String(), strings.TrimSpace(audit.String()))
	cancel()
	require.NoError(t, <-done)
}
