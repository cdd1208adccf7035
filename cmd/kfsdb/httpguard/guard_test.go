package httpguard_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"runtime"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/knowledgefs/kfsdb/cmd/kfsdb/httpguard"
)

// strong passes CheckToken (`openssl rand -base64 32`).
const strong = "q7Vx2LmN9pRt4KwZs8YbHc3FjD6gUe1A+oXiW5rTnQ0="

func status(t *testing.T, u string, hdr map[string]string) int {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, u, nil)
	require.NoError(t, err)
	for k, v := range hdr {
		if k == "Host" {
			req.Host = v
		} else {
			req.Header.Set(k, v)
		}
	}
	res, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	res.Body.Close()
	return res.StatusCode
}

// TestMetricsGuard: without a token, /metrics answers loopback requests
// only, never one a proxy forwarded (with Host: 127.0.0.1, as
// httputil.ReverseProxy's SetURL and nginx's proxy_pass send it) nor a
// DNS-rebound Host; with a token, only requests that carry it.
func TestMetricsGuard(t *testing.T) {
	t.Parallel()
	ok := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("kfsdb_attempts 1\n")) })
	open := httptest.NewServer(httpguard.Metrics(ok, httpguard.MetricsGuard{}))
	t.Cleanup(open.Close)
	withToken := httptest.NewServer(httpguard.Metrics(ok, httpguard.MetricsGuard{Token: strong}))
	t.Cleanup(withToken.Close)
	target, err := url.Parse(open.URL)
	require.NoError(t, err)
	proxy := httptest.NewServer(&httputil.ReverseProxy{Rewrite: func(r *httputil.ProxyRequest) {
		r.SetURL(target)
		r.SetXForwarded()
	}})
	t.Cleanup(proxy.Close)
	for name, tc := range map[string]struct{ got, want int }{
		"LoopbackIs200":      {status(t, open.URL+"/metrics", nil), http.StatusOK},
		"LocalhostHostIs200": {status(t, open.URL+"/metrics", map[string]string{"Host": "localhost:9090"}), http.StatusOK},
		"ThroughProxyIs403":  {status(t, proxy.URL+"/metrics", nil), http.StatusForbidden},
		"ForwardedIs403":     {status(t, open.URL+"/metrics", map[string]string{"Forwarded": "for=192.0.2.1"}), http.StatusForbidden},
		"RebindingHostIs403": {status(t, open.URL+"/metrics", map[string]string{"Host": "evil.example:9090"}), http.StatusForbidden},
		"NoTokenIs401":       {status(t, withToken.URL+"/metrics", nil), http.StatusUnauthorized},
		"WrongTokenIs401":    {status(t, withToken.URL+"/metrics", map[string]string{"Authorization": "Bearer " + strong + "x"}), http.StatusUnauthorized},
		"TokenIs200":         {status(t, withToken.URL+"/metrics", map[string]string{"Authorization": "Bearer " + strong}), http.StatusOK},
		"TokenAnyHostIs200":  {status(t, withToken.URL+"/metrics", map[string]string{"Authorization": "Bearer " + strong, "Host": "metrics.example"}), http.StatusOK},
	} {
		t.Run(name, func(t *testing.T) { require.Equal(t, tc.want, tc.got) })
	}
}

func TestTokens(t *testing.T) {
	t.Parallel()
	for _, weak := range []string{"", "x", "correct-horse", "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa", "abababababababababababababab", "has a space in it 0123456789",
		"password1password1passw0rd", "guard-test-token-0123456789-abc", "qwertyuiopasdfghjklzxcvbnm123456", "Pa$$w0rdPa$$w0rdPa$$w0rd!!", "abcdefghijklmnopqrstuvwxyz0123456789"} {
		require.ErrorIs(t, httpguard.CheckToken(weak), httpguard.ErrWeakToken, weak)
	}
	require.NoError(t, httpguard.CheckToken(strong))
	require.ErrorContains(t, httpguard.ListenAllowed("0.0.0.0:9090", "", "MetricsListen"), "not a loopback address")
	require.ErrorContains(t, httpguard.ListenAllowed(":9090", "", "MetricsListen"), "not a loopback address")
	require.NoError(t, httpguard.ListenAllowed("127.0.0.1:9090", "", "MetricsListen"))
	require.NoError(t, httpguard.ListenAllowed("0.0.0.0:9090", strong, "MetricsListen"))
	require.ErrorIs(t, httpguard.ListenAllowed("0.0.0.0:9090", "short", "MetricsListen"), httpguard.ErrWeakToken)

	file := filepath.Join(t.TempDir(), "token")
	require.NoError(t, os.WriteFile(file, []byte(strong+"\nignored\n"), 0o600))
	got, err := httpguard.ReadToken(file, "from-env")
	require.NoError(t, err)
	require.Equal(t, strong, got, "the file wins, its first line")
	got, err = httpguard.ReadToken("", " from-env\n")
	require.NoError(t, err)
	require.Equal(t, "from-env", got)
	_, err = httpguard.ReadToken(filepath.Join(t.TempDir(), "missing"), "")
	require.Error(t, err)
}

// TestReadTokenRefusesOpenFiles: a token file its group or others may
// read or write is refused, naming its mode and the fix (issue 39: a 0644
// token file was accepted).
func TestReadTokenRefusesOpenFiles(t *testing.T) {
	t.Parallel()
	if runtime.GOOS == "windows" {
		t.Skip("no Unix modes")
	}
	for _, mode := range []os.FileMode{0o644, 0o640, 0o604, 0o620, 0o602, 0o666} {
		file := filepath.Join(t.TempDir(), "token")
		require.NoError(t, os.WriteFile(file, []byte(strong+"\n"), 0o600))
		require.NoError(t, os.Chmod(file, mode)) // WriteFile's mode passes the umask
		_, err := httpguard.ReadToken(file, "")
		require.ErrorIs(t, err, httpguard.ErrTokenFileMode, "%04o", mode)
		require.ErrorContains(t, err, fmt.Sprintf("mode %04o", mode))
		require.ErrorContains(t, err, "chmod 600 "+file)
	}
	for _, mode := range []os.FileMode{0o600, 0o400} {
		file := filepath.Join(t.TempDir(), "token")
		require.NoError(t, os.WriteFile(file, []byte(strong+"\n"), 0o600))
		require.NoError(t, os.Chmod(file, mode))
		got, err := httpguard.ReadToken(file, "")
		require.NoError(t, err, "%04o", mode)
		require.Equal(t, strong, got)
	}
}
