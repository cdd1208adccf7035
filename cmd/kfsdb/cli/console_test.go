package cli

import (
	"bytes"
	"context"
	"net/http"
	"regexp"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/knowledgefs/kfsdb/tests/pgtest"
	"github.com/knowledgefs/kfsdb/tests/testfactory"
)

// TestConsoleRefusesNonLoopbackWithoutToken: the check happens before any
// listen or connect, and is a usage error (exit 2).
func TestConsoleRefusesNonLoopbackWithoutToken(t *testing.T) {
	t.Parallel()
	for _, listen := range []string{"0.0.0.0:8080", ":8080", "192.0.2.1:8080", "[::]:8080", "example.com:8080"} {
		var stdout, stderr bytes.Buffer
		code := Main(t.Context(), []string{"console", "--listen", listen, "--database-url", "postgres://u@h/db"}, &stdout, &stderr, envWith(""))
		require.Equal(t, 2, code, listen)
		require.Contains(t, stderr.String(), "an auth token is required", listen)
	}
	var out bytes.Buffer
	for name, tc := range map[string]struct {
		opts    ConsoleOpts
		wantErr string
	}{
		"LoopbackWithoutToken":  {ConsoleOpts{DatabaseURL: "postgres://u@h/db", Listen: "127.0.0.1:0", Out: &out}, ""},
		"DefaultListen":         {ConsoleOpts{DatabaseURL: "postgres://u@h/db", Out: &out}, ""},
		"LocalhostWithoutToken": {ConsoleOpts{DatabaseURL: "postgres://u@h/db", Listen: "localhost:8080", Out: &out}, ""},
		"IPv6LoopbackNoToken":   {ConsoleOpts{DatabaseURL: "postgres://u@h/db", Listen: "[::1]:8080", Out: &out}, ""},
		"AnyInterfaceWithToken": {ConsoleOpts{DatabaseURL: "postgres://u@h/db", Listen: "0.0.0.0:8080", AuthToken: "t", Out: &out}, ""},
		"AnyInterfaceNoToken":   {ConsoleOpts{DatabaseURL: "postgres://u@h/db", Listen: "0.0.0.0:8080", Out: &out}, "auth token is required"},
		"ListenWithoutPort":     {ConsoleOpts{DatabaseURL: "postgres://u@h/db", Listen: "127.0.0.1", Out: &out}, "not host:port"},
		"MissingURL":            {ConsoleOpts{Out: &out}, "DatabaseURL is required"},
		"MissingOut":            {ConsoleOpts{DatabaseURL: "postgres://u@h/db"}, "Out is required"},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			requireValidateErr(t, tc.opts.Validate(), tc.wantErr)
		})
	}
	// The token may come from the environment.
	var stderr bytes.Buffer
	env := func(k string) string {
		return map[string]string{EnvConsoleToken: "from-env"}[k]
	}
	code := Main(t.Context(), []string{"console", "--listen", "0.0.0.0:8080"}, &out, &stderr, env)
	require.Equal(t, 2, code)
	require.Contains(t, stderr.String(), "DatabaseURL is required", "the token was taken from the environment")
}

// TestConsoleServesUntilCanceled runs the command on a real database and a
// real listener: it prints its address, serves the overview, and returns
// nil when ctx ends.
func TestConsoleServesUntilCanceled(t *testing.T) {
	t.Parallel()
	db := pgtest.NewDB(t)
	ctx, cancel := context.WithCancel(t.Context())
	var out testfactory.SyncBuffer
	done := make(chan error, 1)
	go func() {
		done <- Console(ctx, &ConsoleOpts{DatabaseURL: db.URL, Listen: "127.0.0.1:0", ReadOnly: true, Out: &out})
	}()
	addr := regexp.MustCompile(`kfsdb console on (http://127\.0\.0\.1:\d+/)`)
	var base string
	require.Eventually(t, func() bool {
		m := addr.FindStringSubmatch(out.String())
		if m != nil {
			base = m[1]
		}
		return m != nil
	}, 10*time.Second, 10*time.Millisecond, "no address printed: %s", out.String())
	res, err := http.Get(base)
	require.NoError(t, err)
	res.Body.Close()
	require.Equal(t, http.StatusOK, res.StatusCode)
	cancel()
	require.NoError(t, <-done)
}
