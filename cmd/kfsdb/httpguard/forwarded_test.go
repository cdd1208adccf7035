package httpguard_test

import (
	"net/http"
	"net/netip"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/knowledgefs/kfsdb/cmd/kfsdb/httpguard"
)

// TestLastHop: only the last element of well-formed forwarding headers
// is believed, and nothing when one is malformed or they disagree (issue
// 39's N6: "proto=https" anywhere in Forwarded used to mean https).
func TestLastHop(t *testing.T) {
	t.Parallel()
	addr := netip.MustParseAddr
	for _, c := range []struct {
		name   string
		header map[string][]string
		want   httpguard.Hop
		bad    bool
	}{
		{name: "none"},
		// Forwarded alone
		{name: "simple", header: map[string][]string{"Forwarded": {"for=192.0.2.60;proto=https;by=203.0.113.43;host=example.com"}},
			want: httpguard.Hop{For: addr("192.0.2.60"), Proto: "https", Host: "example.com"}},
		{name: "case-insensitive keys, spaces around ;", header: map[string][]string{"Forwarded": {"For=192.0.2.60 ; PROTO=HTTPS"}},
			want: httpguard.Hop{For: addr("192.0.2.60"), Proto: "https"}},
		{name: "quoted IPv6 with port", header: map[string][]string{"Forwarded": {`for="[2001:db8:cafe::17]:4711";proto=http`}},
			want: httpguard.Hop{For: addr("2001:db8:cafe::17"), Proto: "http"}},
		{name: "quoted IPv4 with port", header: map[string][]string{"Forwarded": {`for="192.0.2.43:47011"`}},
			want: httpguard.Hop{For: addr("192.0.2.43")}},
		{name: "unknown and obfuscated", header: map[string][]string{"Forwarded": {`for=unknown, for="_hidden:_port";proto=https`}},
			want: httpguard.Hop{Proto: "https"}},
		{name: "extension parameter", header: map[string][]string{"Forwarded": {`for=192.0.2.1;ext="a;b,c"`}},
			want: httpguard.Hop{For: addr("192.0.2.1")}},
		{name: "host with port", header: map[string][]string{"Forwarded": {`host="console.example:8443";proto=https`}},
			want: httpguard.Hop{Proto: "https", Host: "console.example:8443"}},
		{name: "only the last element, over lines", header: map[string][]string{"Forwarded": {"for=198.51.100.1;proto=https", "for=192.0.2.2;proto=http"}},
			want: httpguard.Hop{For: addr("192.0.2.2"), Proto: "http"}},
		{name: "issue: proto=https in an earlier element from an untrusted hop", header: map[string][]string{"Forwarded": {"proto=https, for=192.0.2.2"}},
			want: httpguard.Hop{For: addr("192.0.2.2")}},
		{name: "empty list elements skipped", header: map[string][]string{"Forwarded": {", for=192.0.2.2 ,"}},
			want: httpguard.Hop{For: addr("192.0.2.2")}},
		{name: "issue: proto=https quoted in for=", header: map[string][]string{"Forwarded": {`for="proto=https"`}}, bad: true},
		{name: "proto=https inside a quoted extension", header: map[string][]string{"Forwarded": {`for=192.0.2.2;x="proto=https"`}},
			want: httpguard.Hop{For: addr("192.0.2.2")}},
		{name: "unquoted port", header: map[string][]string{"Forwarded": {"for=192.0.2.43:80"}}, bad: true},
		{name: "unquoted IPv6", header: map[string][]string{"Forwarded": {"for=[2001:db8::1]"}}, bad: true},
		{name: "IPv6 without brackets", header: map[string][]string{"Forwarded": {`for="2001:db8::1"`}}, bad: true},
		{name: "IPv4 in brackets", header: map[string][]string{"Forwarded": {`for="[192.0.2.1]"`}}, bad: true},
		{name: "name, not address", header: map[string][]string{"Forwarded": {"for=evil.example"}}, bad: true},
		{name: "twice in an element", header: map[string][]string{"Forwarded": {"proto=http;proto=https"}}, bad: true},
		{name: "proto junk", header: map[string][]string{"Forwarded": {"proto=https2"}}, bad: true},
		{name: "proto ws", header: map[string][]string{"Forwarded": {"proto=ws"}}, bad: true},
		{name: "unclosed quote", header: map[string][]string{"Forwarded": {`for="192.0.2.1`}}, bad: true},
		{name: "no value", header: map[string][]string{"Forwarded": {"for="}}, bad: true},
		{name: "no =", header: map[string][]string{"Forwarded": {"proto"}}, bad: true},
		{name: "space around =", header: map[string][]string{"Forwarded": {"proto = https"}}, bad: true},
		{name: "junk after value", header: map[string][]string{"Forwarded": {`proto="https"x`}}, bad: true},
		{name: "bad host", header: map[string][]string{"Forwarded": {`host="evil example"`}}, bad: true},
		{name: "no element", header: map[string][]string{"Forwarded": {" , "}}, bad: true},
		{name: "control character", header: map[string][]string{"Forwarded": {"for=\"192.0.2.1\x01\""}}, bad: true},
		// X-Forwarded-* alone
		{name: "X-Forwarded-*", header: map[string][]string{"X-Forwarded-For": {"198.51.100.1, 192.0.2.2"}, "X-Forwarded-Proto": {"https"}, "X-Forwarded-Host": {"console.example"}},
			want: httpguard.Hop{For: addr("192.0.2.2"), Proto: "https", Host: "console.example"}},
		{name: "X-Forwarded-For over lines", header: map[string][]string{"X-Forwarded-For": {"198.51.100.1", "2001:db8::2"}},
			want: httpguard.Hop{For: addr("2001:db8::2")}},
		{name: "X-Forwarded-For junk entry", header: map[string][]string{"X-Forwarded-For": {"evil, 192.0.2.2"}}, bad: true},
		{name: "X-Forwarded-For with port", header: map[string][]string{"X-Forwarded-For": {"192.0.2.2:80"}}, bad: true},
		{name: "X-Forwarded-For empty entry", header: map[string][]string{"X-Forwarded-For": {"192.0.2.2,"}}, bad: true},
		{name: "X-Forwarded-Proto twice", header: map[string][]string{"X-Forwarded-Proto": {"http", "https"}}, bad: true},
		{name: "X-Forwarded-Proto list", header: map[string][]string{"X-Forwarded-Proto": {"https, http"}}, bad: true},
		{name: "X-Forwarded-Proto substring", header: map[string][]string{"X-Forwarded-Proto": {"xhttps"}}, bad: true},
		{name: "X-Forwarded-Host with path", header: map[string][]string{"X-Forwarded-Host": {"evil.example/x"}}, bad: true},
		{name: "X-Forwarded-Host bad port", header: map[string][]string{"X-Forwarded-Host": {"console.example:99999"}}, bad: true},
		{name: "X-Forwarded-Host IPv6", header: map[string][]string{"X-Forwarded-Host": {"[::1]:8080"}},
			want: httpguard.Hop{Host: "[::1]:8080"}},
		{name: "X-Forwarded-Host twice", header: map[string][]string{"X-Forwarded-Host": {"a.example", "b.example"}}, bad: true},
		// both
		{name: "both agree", header: map[string][]string{"Forwarded": {"for=192.0.2.2;proto=https"}, "X-Forwarded-For": {"192.0.2.2"}, "X-Forwarded-Proto": {"https"}},
			want: httpguard.Hop{For: addr("192.0.2.2"), Proto: "https"}},
		{name: "both, each says its own field", header: map[string][]string{"Forwarded": {"for=192.0.2.2"}, "X-Forwarded-Proto": {"https"}},
			want: httpguard.Hop{For: addr("192.0.2.2"), Proto: "https"}},
		{name: "issue: Forwarded proto=https against X-Forwarded-Proto http", header: map[string][]string{"Forwarded": {"proto=https"}, "X-Forwarded-Proto": {"http"}}, bad: true},
		{name: "for differs", header: map[string][]string{"Forwarded": {"for=198.51.100.9"}, "X-Forwarded-For": {"192.0.2.2"}}, bad: true},
		{name: "for unknown against an address", header: map[string][]string{"Forwarded": {"for=unknown"}, "X-Forwarded-For": {"192.0.2.2"}}, bad: true},
		{name: "host differs", header: map[string][]string{"Forwarded": {"host=evil.example"}, "X-Forwarded-Host": {"console.example"}}, bad: true},
		{name: "malformed X-Forwarded-* spoils a good Forwarded", header: map[string][]string{"Forwarded": {"for=192.0.2.2;proto=https"}, "X-Forwarded-Proto": {"https, https"}}, bad: true},
	} {
		t.Run(c.name, func(t *testing.T) {
			h := http.Header{}
			for k, vs := range c.header {
				for _, v := range vs {
					h.Add(k, v)
				}
			}
			got, err := httpguard.LastHop(h)
			if c.bad {
				require.ErrorIs(t, err, httpguard.ErrForwarding)
				require.Equal(t, httpguard.Hop{}, got, "nothing is believed")
				return
			}
			require.NoError(t, err)
			require.Equal(t, c.want, got)
		})
	}
}

// TestTrustedProxies: over-broad prefixes are refused (issue 39: a /1
// was accepted), and what is trusted is said in words, with a warning for
// loopback.
func TestTrustedProxies(t *testing.T) {
	t.Parallel()
	for _, p := range []string{"0.0.0.0/0", "0.0.0.0/1", "128.0.0.0/1", "10.0.0.0/7", "::/0", "2000::/3", "2001:db8::/31", "::ffff:10.0.0.0/104"} {
		err := httpguard.CheckTrustedProxy(netip.MustParsePrefix(p))
		require.ErrorIs(t, err, httpguard.ErrTrustedProxy, p)
	}
	require.ErrorContains(t, httpguard.CheckTrustedProxy(netip.MustParsePrefix("0.0.0.0/1")), "2147483648 addresses")
	require.ErrorIs(t, httpguard.CheckTrustedProxy(netip.Prefix{}), httpguard.ErrTrustedProxy)
	for _, p := range []string{"10.0.0.0/8", "10.0.0.0/24", "192.0.2.7/32", "2001:db8::/32", "::1/128"} {
		require.NoError(t, httpguard.CheckTrustedProxy(netip.MustParsePrefix(p)), p)
	}

	require.Equal(t, []string{
		"trusting Forwarded and X-Forwarded-* from 10.0.0.0/24 (256 addresses)",
		"trusting Forwarded and X-Forwarded-* from 192.0.2.7 (1 address)",
		"trusting Forwarded and X-Forwarded-* from 2001:db8::/32 (2^96 addresses)",
	}, httpguard.DescribeTrustedProxies([]netip.Prefix{netip.MustParsePrefix("10.0.0.0/24"), netip.MustParsePrefix("192.0.2.7/32"), netip.MustParsePrefix("2001:db8::/32")}))
	for _, p := range []string{"127.0.0.1/32", "::1/128", "127.0.0.0/8"} {
		lines := httpguard.DescribeTrustedProxies([]netip.Prefix{netip.MustParsePrefix(p)})
		require.Len(t, lines, 2, p)
		require.Contains(t, lines[1], "trusts every process on this host", p)
	}
	require.Equal(t, "warning: --trusted-proxy 127.0.0.1 trusts every process on this host: any local program can claim any client address and https",
		httpguard.DescribeTrustedProxies([]netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")})[1])
	require.Empty(t, httpguard.DescribeTrustedProxies(nil))
}
