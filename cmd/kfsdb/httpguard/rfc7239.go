package httpguard

import (
	"fmt"
	"net/netip"
	"strconv"
	"strings"
)

// lastForwarded parses the Forwarded header's values (RFC 7239 §4) and
// returns its last element; has is false when there is no Forwarded
// header. Empty list elements are skipped (RFC 7230 §7), but a header
// that holds no element at all is malformed.
func lastForwarded(values []string) (last said, has bool, err error) {
	if len(values) == 0 {
		return said{}, false, nil
	}
	p := &forwardedParser{s: strings.Join(values, ",")}
	found := false
	for {
		elem, empty, err := p.element()
		if err != nil {
			return said{}, true, fmt.Errorf("%w: Forwarded: %w", ErrForwarding, err)
		}
		if !empty {
			last, found = elem, true
		}
		if p.done() {
			break
		}
		p.i++ // the ','
	}
	if !found {
		return said{}, true, fmt.Errorf("%w: Forwarded holds no element", ErrForwarding)
	}
	return last, true, nil
}

// forwardedParser walks a Forwarded header: s from i on.
type forwardedParser struct {
	s string
	i int
}

func (p *forwardedParser) done() bool { return p.i >= len(p.s) }

func (p *forwardedParser) skipOWS() {
	for !p.done() && (p.s[p.i] == ' ' || p.s[p.i] == '\t') {
		p.i++
	}
}

// element reads pairs up to the next ',' (left unread) or the end.
func (p *forwardedParser) element() (e said, empty bool, err error) {
	seen := map[string]bool{}
	for {
		p.skipOWS()
		if p.done() || p.s[p.i] == ',' || p.s[p.i] == ';' {
			// an empty pair
		} else {
			key, value, err := p.pair()
			if err != nil {
				return said{}, false, err
			}
			if seen[key] {
				return said{}, false, fmt.Errorf("%s= given twice in one element", key)
			}
			seen[key] = true
			if err := e.set(key, value); err != nil {
				return said{}, false, err
			}
			p.skipOWS()
		}
		switch {
		case p.done() || p.s[p.i] == ',':
			return e, len(seen) == 0, nil
		case p.s[p.i] == ';':
			p.i++
		default:
			return said{}, false, fmt.Errorf("unexpected %q at byte %d", p.s[p.i], p.i)
		}
	}
}

// pair reads token "=" ( token / quoted-string ); the key is lower-cased
// (parameter names are case-insensitive).
func (p *forwardedParser) pair() (key, value string, err error) {
	key = p.token()
	if key == "" {
		return "", "", fmt.Errorf("a parameter name is missing at byte %d", p.i)
	}
	if p.done() || p.s[p.i] != '=' {
		return "", "", fmt.Errorf("%s has no '=' value", key)
	}
	p.i++
	if !p.done() && p.s[p.i] == '"' {
		value, err = p.quoted()
	} else if value = p.token(); value == "" {
		err = fmt.Errorf("%s= has no value", key)
	}
	return strings.ToLower(key), value, err
}

func (p *forwardedParser) token() string {
	start := p.i
	for !p.done() && isTchar(p.s[p.i]) {
		p.i++
	}
	return p.s[start:p.i]
}

// quoted reads a quoted-string (RFC 7230 §3.2.6) and returns its content
// with quoted-pairs undone.
func (p *forwardedParser) quoted() (string, error) {
	start := p.i
	p.i++ // the opening quote
	var b strings.Builder
	for !p.done() {
		c := p.s[p.i]
		switch {
		case c == '"':
			p.i++
			return b.String(), nil
		case c == '\\':
			if p.i+1 >= len(p.s) || !isQuotable(p.s[p.i+1]) {
				return "", fmt.Errorf("bad escape in the quoted string at byte %d", p.i)
			}
			b.WriteByte(p.s[p.i+1])
			p.i += 2
		case c == '\t' || c == ' ' || c == 0x21 || c >= 0x23 && c <= 0x5b || c >= 0x5d && c <= 0x7e || c >= 0x80:
			b.WriteByte(c)
			p.i++
		default:
			return "", fmt.Errorf("control character in the quoted string at byte %d", p.i)
		}
	}
	return "", fmt.Errorf("the quoted string at byte %d is not closed", start)
}

func isQuotable(c byte) bool { return c == '\t' || c >= ' ' && c != 0x7f }

// isTchar is RFC 7230's tchar.
func isTchar(c byte) bool {
	switch {
	case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9':
		return true
	}
	return strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0
}

// set checks one known parameter's value and records it; unknown
// parameters (extensions) are checked for syntax only, by the parser.
func (e *said) set(key, value string) error {
	switch key {
	case "for":
		a, err := node(value)
		if err != nil {
			return fmt.Errorf("for=: %w", err)
		}
		e.hop.For, e.saidFor = a, true
	case "by":
		if _, err := node(value); err != nil {
			return fmt.Errorf("by=: %w", err)
		}
	case "proto":
		proto, err := checkProto(value)
		if err != nil {
			return err
		}
		e.hop.Proto = proto
	case "host":
		if err := checkHost(value); err != nil {
			return err
		}
		e.hop.Host = value
	}
	return nil
}

// node reads RFC 7239 §6's node: an IPv4 address, an IPv6 address in
// brackets, "unknown" or an obfuscated name, with an optional port (or
// obfuscated port). The address is invalid for "unknown" and obfuscated
// names.
func node(v string) (netip.Addr, error) {
	name, port := v, ""
	if strings.HasPrefix(v, "[") {
		end := strings.IndexByte(v, ']')
		if end < 0 {
			return netip.Addr{}, fmt.Errorf("%q: no closing ']'", v)
		}
		name, port = v[:end+1], v[end+1:]
		if port != "" && port[0] != ':' {
			return netip.Addr{}, fmt.Errorf("%q: junk after ']'", v)
		}
	} else if n, pt, ok := strings.Cut(v, ":"); ok {
		name, port = n, ":"+pt
	}
	if port != "" {
		if pt := port[1:]; !isObfuscated(pt) {
			if n, err := strconv.Atoi(pt); err != nil || len(pt) > 5 || n < 0 || pt[0] == '+' || pt[0] == '-' {
				return netip.Addr{}, fmt.Errorf("%q: bad port", v)
			}
		}
	}
	switch {
	case strings.HasPrefix(name, "["):
		a, err := netip.ParseAddr(name[1 : len(name)-1])
		if err != nil || !a.Is6() || a.Zone() != "" {
			return netip.Addr{}, fmt.Errorf("%q: not an IPv6 address in brackets", v)
		}
		return a.Unmap(), nil
	case strings.EqualFold(name, "unknown") || isObfuscated(name):
		return netip.Addr{}, nil
	}
	a, err := netip.ParseAddr(name)
	if err != nil || !a.Is4() {
		return netip.Addr{}, fmt.Errorf("%q: not an IPv4 address, [IPv6], unknown or _obfuscated", v)
	}
	return a, nil
}

// isObfuscated is RFC 7239's obfnode and obfport: "_" then letters,
// digits, '.', '_' or '-'.
func isObfuscated(s string) bool {
	if len(s) < 2 || s[0] != '_' {
		return false
	}
	for i := 1; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-') {
			return false
		}
	}
	return true
}
