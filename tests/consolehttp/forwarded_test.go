package consolehttp_test

import (
	"net/http"
	"net/netip"
	"net/url"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/knowledgefs/kfsdb/cmd/kfsdb/console"
)

// TestForwardedProtoIsParsed is issue 39's N6: from a trusted proxy,
// "proto=https" anywhere in Forwarded (quoted in for=, or in an element
// an earlier, untrusted hop wrote) made the session cookie Secure,
// overriding X-Forwarded-Proto. Now only the proxy's own, last element of
// well-formed headers counts; a malformed or conflicting header is not
// believed at all.
func TestForwardedProtoIsParsed(t *testing.T) {
	b := setup(t)
	// The test's own requests come from loopback: the trusted proxy.
	base := b.start(t, console.Config{TrustedProxies: []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32"), netip.MustParsePrefix("::1/128")}})
	loginWith := func(header map[string]string) string {
		t.Helper()
		// No Origin (it would have to match the scheme the console
		// believes): Sec-Fetch-Site says same-origin instead.
		h := map[string]string{"Authorization": "", "Origin": "", "Sec-Fetch-Site": "same-origin"}
		for k, v := range header {
			h[k] = v
		}
		res := do(t, http.MethodPost, base+"/login", url.Values{"token": {testToken}}, h)
		require.Equal(t, http.StatusSeeOther, res.status, "%v: %s", header, res.body)
		return res.header.Get("Set-Cookie")
	}
	for name, header := range map[string]map[string]string{
		"QuotedInFor":           {"Forwarded": `for="proto=https"`, "X-Forwarded-Proto": "http"},
		"EarlierElement":        {"Forwarded": "for=192.0.2.1;proto=https, for=192.0.2.2"},
		"AgainstXForwarded":     {"Forwarded": "proto=https", "X-Forwarded-Proto": "http"},
		"QuotedExtension":       {"Forwarded": `for=192.0.2.2;note="proto=https"`},
		"XForwardedProtoList":   {"X-Forwarded-Proto": "https, http"},
		"XForwardedProtoSuffix": {"X-Forwarded-Proto": "not-https"},
	} {
		c := loginWith(header)
		require.True(t, strings.HasPrefix(c, "kfsdb_console="), "%s: %s", name, c)
		require.NotContains(t, c, "Secure", name)
	}
	for name, header := range map[string]map[string]string{
		"Forwarded":       {"Forwarded": "for=192.0.2.1;proto=http, for=192.0.2.2;proto=https"},
		"XForwarded":      {"X-Forwarded-Proto": "https"},
		"BothAgree":       {"Forwarded": "for=192.0.2.2;proto=https", "X-Forwarded-Proto": "https", "X-Forwarded-For": "192.0.2.2"},
		"ForwardedQuoted": {"Forwarded": `for="[2001:db8::2]:4711";proto="https"`},
	} {
		c := loginWith(header)
		require.True(t, strings.HasPrefix(c, "__Host-kfsdb_console="), "%s: %s", name, c)
		require.Contains(t, c, "; Secure", name)
	}

	// An over-broad prefix trusts strangers: refused.
	for _, p := range []string{"0.0.0.0/1", "128.0.0.0/1", "::/1"} {
		_, err := console.New(console.Config{DB: b.db.Pool, AuthToken: testToken, TrustedProxies: []netip.Prefix{netip.MustParsePrefix(p)}})
		require.ErrorIs(t, err, console.ErrInvalidConfig, p)
	}
}
