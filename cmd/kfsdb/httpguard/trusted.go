package httpguard

import (
	"errors"
	"fmt"
	"net/netip"
)

// MinTrustedBits4 and MinTrustedBits6 are the shortest trusted-proxy
// prefixes accepted: a proxy is a host or a subnet of hosts, and a
// shorter prefix (a /1 is half the Internet) trusts strangers.
const (
	MinTrustedBits4 = 8
	MinTrustedBits6 = 32
)

// ErrTrustedProxy is returned by CheckTrustedProxy for a prefix that
// trusts too much or nothing.
var ErrTrustedProxy = errors.New("invalid trusted proxy")

// CheckTrustedProxy refuses an invalid prefix, one shorter than
// MinTrustedBits4 (IPv4) or MinTrustedBits6 (IPv6), and an IPv4-mapped
// IPv6 prefix (peers are compared as IPv4: it would never match).
func CheckTrustedProxy(p netip.Prefix) error {
	switch {
	case !p.IsValid():
		return fmt.Errorf("%w: %v is not an IP address or CIDR prefix", ErrTrustedProxy, p)
	case p.Addr().Is4In6():
		return fmt.Errorf("%w: %v is an IPv4-mapped prefix: write it as IPv4", ErrTrustedProxy, p)
	case p.Addr().Is4() && p.Bits() < MinTrustedBits4:
		return fmt.Errorf("%w: %v trusts %s addresses: name the proxy's address or subnet (at least /%d)", ErrTrustedProxy, p, addressCount(p), MinTrustedBits4)
	case p.Addr().Is6() && p.Bits() < MinTrustedBits6:
		return fmt.Errorf("%w: %v trusts %s addresses: name the proxy's address or subnet (at least /%d)", ErrTrustedProxy, p, addressCount(p), MinTrustedBits6)
	}
	return nil
}

// DescribeTrustedProxies says in words what the prefixes trust, one line
// each, and warns, once, when they hold a loopback address: then every
// process on this host can claim any client address and https.
func DescribeTrustedProxies(ps []netip.Prefix) []string {
	var lines []string
	loopback := ""
	for _, p := range ps {
		lines = append(lines, fmt.Sprintf("trusting Forwarded and X-Forwarded-* from %s (%s)", prefixString(p), plural(addressCount(p), "address", "addresses")))
		if loopback == "" && (p.Contains(netip.MustParseAddr("127.0.0.1")) || p.Contains(netip.IPv6Loopback()) ||
			p.Overlaps(netip.MustParsePrefix("127.0.0.0/8"))) {
			loopback = prefixString(p)
		}
	}
	if loopback != "" {
		lines = append(lines, fmt.Sprintf("warning: --trusted-proxy %s trusts every process on this host: any local program can claim any client address and https", loopback))
	}
	return lines
}

// prefixString writes a one-address prefix as its address.
func prefixString(p netip.Prefix) string {
	if p.IsSingleIP() {
		return p.Addr().String()
	}
	return p.String()
}

// addressCount is how many addresses p holds, in digits up to 2^62 and
// as a power of two past it.
func addressCount(p netip.Prefix) string {
	host := p.Addr().BitLen() - p.Bits()
	if host > 62 {
		return fmt.Sprintf("2^%d", host)
	}
	return fmt.Sprint(int64(1) << host)
}

func plural(n, one, many string) string {
	if n == "1" {
		return n + " " + one
	}
	return n + " " + many
}
