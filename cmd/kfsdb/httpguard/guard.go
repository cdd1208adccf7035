// Package httpguard holds the access rules the kfsdb command's HTTP
// servers share (the web console and every /metrics server): how a token
// is read and how strong it must be, what counts as a loopback request
// (never one that came through a proxy), the /metrics handler's guard,
// and what a trusted proxy's forwarding headers say (forwarded.go) and
// which proxies may be trusted (trusted.go).
package httpguard

import (
	"crypto/subtle"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"os"
	"runtime"
	"strconv"
	"strings"
	"time"
)

// MinTokenLength is the shortest token accepted, in bytes; a token must
// also hold MinTokenBits estimated bits (EstimateBits): one rule for the
// console's token and the metrics token.
const MinTokenLength = 24

// ErrWeakToken is returned by CheckToken for a token too short or too
// patterned to resist guessing.
var ErrWeakToken = errors.New("weak token")

// CheckToken refuses a token shorter than MinTokenLength bytes, one
// holding whitespace or control characters (a file's trailing newline is
// trimmed by ReadToken, not here), and one EstimateBits puts under
// MinTokenBits: repeats, sequences, keyboard runs and common words count
// for little.
func CheckToken(token string) error {
	const how = "make one with `openssl rand -base64 32`"
	if len(token) < MinTokenLength {
		return fmt.Errorf("%w: a token must be at least %d characters (got %d); %s", ErrWeakToken, MinTokenLength, len(token), how)
	}
	for i := 0; i < len(token); i++ {
		if token[i] <= ' ' || token[i] == 0x7f {
			return fmt.Errorf("%w: a token must not hold spaces or control characters", ErrWeakToken)
		}
	}
	if bits := EstimateBits(token); bits < MinTokenBits {
		return fmt.Errorf("%w: the token is too predictable (about %.0f bits, at least %d needed: repeats, sequences and common words count for little); %s",
			ErrWeakToken, bits, MinTokenBits, how)
	}
	return nil
}

// ErrTokenFileMode is returned by ReadToken for a token file that its
// group or other users may read or write.
var ErrTokenFileMode = errors.New("token file open to other users")

// ReadToken reads a token from file (its first line, trimmed) when file
// is set, else takes env's value; "" when neither gives one. It never
// takes a token from the command line, where every local user sees it
// (ps, /proc/PID/cmdline), and refuses a file whose mode lets its group
// or others read or write it (ErrTokenFileMode): chmod 600.
func ReadToken(file, env string) (string, error) {
	if file == "" {
		return strings.TrimSpace(env), nil
	}
	f, err := os.Open(file)
	if err != nil {
		return "", fmt.Errorf("read the token file: %w", err)
	}
	defer f.Close()
	// The mode of the file opened, not of the path: it cannot change
	// between the check and the read.
	info, err := f.Stat()
	if err != nil {
		return "", fmt.Errorf("read the token file: %w", err)
	}
	if mode := info.Mode().Perm(); mode&0o077 != 0 && runtime.GOOS != "windows" {
		return "", fmt.Errorf("%w: %s has mode %04o, so other users may read it: run `chmod 600 %s`", ErrTokenFileMode, file, mode, file)
	}
	raw, err := io.ReadAll(f)
	if err != nil {
		return "", fmt.Errorf("read the token file: %w", err)
	}
	line, _, _ := strings.Cut(string(raw), "\n")
	token := strings.TrimSpace(line)
	if token == "" {
		return "", fmt.Errorf("the token file %s is empty", file)
	}
	return token, nil
}

// BearerMatches says whether r carries "Authorization: Bearer <token>",
// compared in constant time; never for an empty token.
func BearerMatches(r *http.Request, token string) bool {
	got, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	return ok && token != "" && subtle.ConstantTimeCompare([]byte(got), []byte(token)) == 1
}

// HostIsLoopback says whether a Host header (or a --listen host) names
// this host: localhost or a loopback IP, with or without a port.
func HostIsLoopback(host string) bool {
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	host = strings.Trim(host, "[]")
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// ListenIsLoopback says whether a listen address only accepts connections
// from this host: a loopback IP or "localhost". An empty host (":8080")
// listens on every interface.
func ListenIsLoopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	return err == nil && host != "" && HostIsLoopback(host)
}

// forwardingHeaders are those a proxy adds: a request carrying one came
// through a proxy, whatever its Host and peer address say.
var forwardingHeaders = []string{"Forwarded", "X-Forwarded-For", "X-Forwarded-Host", "X-Forwarded-Proto", "X-Real-Ip", "Via"}

// Forwarded says whether r carries a header a proxy adds.
func Forwarded(r *http.Request) bool {
	for _, h := range forwardingHeaders {
		if _, ok := r.Header[h]; ok {
			return true
		}
	}
	return false
}

// IsLoopback says whether r is a request made on this host: its peer is
// a loopback address, its Host names this host (a DNS-rebound name does
// not), and it carries no proxy header. A proxy on this host that
// forwards with "Host: 127.0.0.1" (nginx's default for proxy_pass to
// 127.0.0.1, httputil.ReverseProxy's SetURL) adds X-Forwarded-For or
// Forwarded, or, as nginx does by default, nothing: which is why a
// loopback request is only trusted where nothing but loopback listens,
// and the console never trusts one (it always asks for a session).
func IsLoopback(r *http.Request) bool {
	peer, err := netip.ParseAddrPort(r.RemoteAddr)
	return err == nil && peer.Addr().IsLoopback() && HostIsLoopback(r.Host) && !Forwarded(r)
}

// MetricsPath is where the metrics servers serve.
const MetricsPath = "/metrics"

// MetricsGuard is how Metrics guards a /metrics handler.
type MetricsGuard struct {
	// Token is the metrics token, never the console's: with one, every
	// request must carry it as a bearer token (Prometheus:
	// authorization.credentials_file); without one, only loopback
	// requests (IsLoopback) are served, which ListenAllowed requires to
	// be all the listener can receive.
	Token string
	// Throttle counts wrong tokens by the peer's address (429 past its
	// free tries) and bounds their log lines. Defaults to a new one; kfsdb
	// console shares its own.
	Throttle *Throttle
	// Log receives one line per refused token, as many as Throttle lets
	// through. Defaults to slog.Default().
	Log *slog.Logger
}

// Metrics guards h as g says. A right token is always served, however
// many wrong ones its address sent (see Throttle); an Authorization
// header that is not a bearer token (an auth proxy's Basic) is no guess
// at the metrics token: 401, neither counted nor logged.
func Metrics(h http.Handler, g MetricsGuard) http.Handler {
	if g.Throttle == nil {
		g.Throttle = NewThrottle(nil)
	}
	if g.Log == nil {
		g.Log = slog.Default()
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "no-store")
		w.Header().Set("X-Content-Type-Options", "nosniff")
		_, bearer := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
		switch {
		case r.Method != http.MethodGet && r.Method != http.MethodHead:
			w.Header().Set("Allow", "GET, HEAD")
			http.Error(w, "only GET", http.StatusMethodNotAllowed)
		case g.Token != "" && BearerMatches(r, g.Token):
			h.ServeHTTP(w, r)
		case g.Token != "" && bearer:
			refusal := g.Throttle.Fail(peerAddr(r))
			refusal.LogSuppressed(g.Log, "metrics")
			if refusal.Log {
				g.Log.Warn("metrics: wrong bearer token", "remote", r.RemoteAddr, "throttled", refusal.Throttled)
			}
			if refusal.Throttled {
				w.Header().Set("Retry-After", strconv.Itoa(int((refusal.RetryAfter+time.Second-1)/time.Second)))
				http.Error(w, "too many wrong tokens from your address; wait and try again", http.StatusTooManyRequests)
				return
			}
			w.Header().Set("WWW-Authenticate", `Bearer realm="kfsdb metrics"`)
			http.Error(w, "a bearer token is required", http.StatusUnauthorized)
		case g.Token != "":
			w.Header().Set("WWW-Authenticate", `Bearer realm="kfsdb metrics"`)
			http.Error(w, "a bearer token is required", http.StatusUnauthorized)
		case !IsLoopback(r):
			http.Error(w, "these metrics have no token, so they only answer loopback requests that came through no proxy", http.StatusForbidden)
		default:
			h.ServeHTTP(w, r)
		}
	})
}

// peerAddr is r's peer IP, what a server that trusts no proxy counts
// failures by.
func peerAddr(r *http.Request) string {
	if peer, err := netip.ParseAddrPort(r.RemoteAddr); err == nil {
		return peer.Addr().Unmap().String()
	}
	return r.RemoteAddr
}

// ListenAllowed refuses to listen on a non-loopback address without a
// token, and refuses a weak token.
func ListenAllowed(addr, token, what string) error {
	if token != "" {
		if err := CheckToken(token); err != nil {
			return fmt.Errorf("%s token: %w", what, err)
		}
		return nil
	}
	if !ListenIsLoopback(addr) {
		return fmt.Errorf("%s address %q is not a loopback address, so a token is required", what, addr)
	}
	return nil
}
