package httpguard

import (
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
)

// ErrForwarding is returned by LastHop for a forwarding header that is
// malformed, or for a Forwarded and an X-Forwarded-* header that
// disagree.
var ErrForwarding = errors.New("forwarding headers not believed")

// Hop is what the proxy next to a server said about the request it
// forwarded, read from the last element it appended. A zero field was
// not said.
type Hop struct {
	// For is the client's address; invalid when not said, or said as
	// "unknown" or an obfuscated name (RFC 7239 §6).
	For netip.Addr
	// Proto is "http" or "https" (lower case), or "".
	Proto string
	// Host is the Host the client asked for, host[:port], or "".
	Host string
}

// LastHop reads what the proxy in front of a server said in h, by one
// rule for every header:
//
//   - Only the last element counts: the one the proxy next to the server
//     appended. Earlier ones are whatever the client or hops before it
//     wrote.
//   - Every header present must be well-formed: Forwarded by RFC 7239
//     (elements separated by commas, pairs by semicolons, values tokens
//     or quoted strings, no parameter twice in an element, for= a node,
//     proto= http or https, host= host[:port]); X-Forwarded-For a list of
//     IP addresses; X-Forwarded-Proto exactly one "http" or "https";
//     X-Forwarded-Host exactly one host[:port].
//   - When Forwarded and X-Forwarded-* both say a field, they must say
//     the same; a field said by one only is taken from it.
//
// Anything else is an error wrapping ErrForwarding, and the caller must
// believe none of the headers (a zero Hop is returned): a malformed or
// conflicting header means a client wrote one the proxy did not
// overwrite, and no rule could tell which part is the proxy's. It does
// not know whether the peer is a proxy to believe: the caller checks.
func LastHop(h http.Header) (Hop, error) {
	fwd, hasFwd, err := lastForwarded(h.Values("Forwarded"))
	if err != nil {
		return Hop{}, err
	}
	xfwd, err := lastXForwarded(h)
	if err != nil {
		return Hop{}, err
	}
	if !hasFwd {
		return xfwd.hop, nil
	}
	hop := fwd.hop
	for _, f := range []struct {
		name             string
		fwdSaid, xfwSaid bool
		same             bool
	}{
		{"for", fwd.saidFor, xfwd.saidFor, fwd.hop.For == xfwd.hop.For},
		{"proto", fwd.hop.Proto != "", xfwd.hop.Proto != "", fwd.hop.Proto == xfwd.hop.Proto},
		{"host", fwd.hop.Host != "", xfwd.hop.Host != "", strings.EqualFold(fwd.hop.Host, xfwd.hop.Host)},
	} {
		if f.fwdSaid && f.xfwSaid && !f.same {
			return Hop{}, fmt.Errorf("%w: Forwarded and X-Forwarded-* say different %s", ErrForwarding, f.name)
		}
	}
	if !fwd.saidFor {
		hop.For = xfwd.hop.For
	}
	hop.Proto = firstSaid(hop.Proto, xfwd.hop.Proto)
	hop.Host = firstSaid(hop.Host, xfwd.hop.Host)
	return hop, nil
}

func firstSaid(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// said is a Hop and whether for= (or X-Forwarded-For) was given, which an
// invalid Hop.For cannot tell ("unknown" is said but not an address).
type said struct {
	hop     Hop
	saidFor bool
}

// lastXForwarded reads the X-Forwarded-* headers of h.
func lastXForwarded(h http.Header) (said, error) {
	var s said
	if vs := h.Values("X-Forwarded-For"); len(vs) > 0 {
		var last netip.Addr
		for _, entry := range strings.Split(strings.Join(vs, ","), ",") {
			a, err := netip.ParseAddr(strings.TrimSpace(entry))
			if err != nil {
				return said{}, fmt.Errorf("%w: X-Forwarded-For entry %q is not an IP address", ErrForwarding, strings.TrimSpace(entry))
			}
			last = a
		}
		s.hop.For, s.saidFor = last.Unmap(), true
	}
	proto, err := single(h, "X-Forwarded-Proto")
	if err != nil {
		return said{}, err
	}
	if proto != "" {
		if s.hop.Proto, err = checkProto(proto); err != nil {
			return said{}, fmt.Errorf("X-Forwarded-Proto: %w", err)
		}
	}
	host, err := single(h, "X-Forwarded-Host")
	if err != nil {
		return said{}, err
	}
	if host != "" {
		if err := checkHost(host); err != nil {
			return said{}, fmt.Errorf("X-Forwarded-Host: %w", err)
		}
		s.hop.Host = host
	}
	return s, nil
}

// single is header name's one value: "" when absent, an error when given
// empty, twice or as a list.
func single(h http.Header, name string) (string, error) {
	vs := h.Values(name)
	switch {
	case len(vs) == 0:
		return "", nil
	case len(vs) > 1 || strings.Contains(vs[0], ","):
		return "", fmt.Errorf("%w: %s holds more than one value", ErrForwarding, name)
	case strings.TrimSpace(vs[0]) == "":
		return "", fmt.Errorf("%w: %s is empty", ErrForwarding, name)
	}
	return strings.TrimSpace(vs[0]), nil
}

func checkProto(v string) (string, error) {
	switch p := strings.ToLower(v); p {
	case "http", "https":
		return p, nil
	}
	return "", fmt.Errorf("%w: proto %q is neither http nor https", ErrForwarding, v)
}

// checkHost accepts host[:port]: a DNS name or IPv4 address, or an IPv6
// address in brackets, and a port of 1..65535.
func checkHost(v string) error {
	host, port := v, ""
	if strings.HasPrefix(v, "[") || strings.Count(v, ":") == 1 {
		h, p, err := net.SplitHostPort(v)
		if err != nil {
			if !strings.HasPrefix(v, "[") || !strings.HasSuffix(v, "]") {
				return fmt.Errorf("%w: host %q is not host[:port]", ErrForwarding, v)
			}
			h = v[1 : len(v)-1]
		}
		host, port = h, p
		if strings.HasPrefix(v, "[") {
			if a, err := netip.ParseAddr(host); err != nil || !a.Is6() || a.Zone() != "" {
				return fmt.Errorf("%w: host %q is not an IPv6 address in brackets", ErrForwarding, v)
			}
			host = ""
		}
	}
	if port != "" {
		if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 || port[0] == '+' {
			return fmt.Errorf("%w: host %q has no valid port", ErrForwarding, v)
		}
	}
	if host != "" && !isDNSName(host) {
		return fmt.Errorf("%w: host %q is not a host name or address", ErrForwarding, v)
	}
	return nil
}

// isDNSName accepts dot-separated labels of letters, digits, '-' and '_'
// (an IPv4 address is one too), each 1..63 long, 253 in all.
func isDNSName(s string) bool {
	if len(s) > 253 {
		return false
	}
	for _, label := range strings.Split(strings.TrimSuffix(s, "."), ".") {
		if label == "" || len(label) > 63 || label[0] == '-' || label[len(label)-1] == '-' {
			return false
		}
		for i := 0; i < len(label); i++ {
			c := label[i]
			if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
				return false
			}
		}
	}
	return true
}
