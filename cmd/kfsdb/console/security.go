package console

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/knowledgefs/kfsdb/cmd/kfsdb/httpguard"
)

// Cookie names: with TLS (the console's own, or a trusted proxy's) the
// cookie is Secure and carries the __Host- prefix, which browsers only
// accept from a secure origin, for Path=/ and no Domain.
const (
	cookieName       = "kfsdb_console"
	secureCookieName = "__Host-kfsdb_console"
)

// csrfTTL is how long a confirmation form stays valid.
const csrfTTL = 15 * time.Minute

// maxBody bounds every request body (a login or an action form is a few
// hundred bytes).
const maxBody = 16 << 10

// headers every response carries: no script, no framing, nothing cached
// (pages hold CSRF tokens, the login page a one-time code).
var securityHeaders = map[string]string{
	"Content-Security-Policy": "default-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'",
	"X-Frame-Options":         "DENY",
	"X-Content-Type-Options":  "nosniff",
	// same-origin, not no-referrer: under no-referrer browsers send
	// "Origin: null" on the console's own form posts, which sameOrigin
	// refuses; other sites get no Referer.
	"Referrer-Policy": "same-origin",
	"Cache-Control":   "no-store",
}

// principal is who a request acts as: a login session (key is the
// session's key) or a bearer token (key "bearer").
type principal struct{ key string }

// audit names the principal in audit lines: a session by the first 12
// characters of its key's hash, never the cookie.
func (p principal) String() string {
	if p.key == "bearer" || len(p.key) < 12 {
		return p.key
	}
	return "session:" + p.key[:12]
}

type principalKey struct{}

func principalOf(r *http.Request) (principal, bool) {
	p, ok := r.Context().Value(principalKey{}).(principal)
	return p, ok
}

// secure applies the checks every request goes through, in order: a
// bounded body and time, a session (or the bearer token) on every route
// but /login and /static/, the same origin on every POST (login
// included), and the read-only switch.
func (s *Server) secure(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		for k, v := range securityHeaders {
			w.Header().Set(k, v)
		}
		r.Body = http.MaxBytesReader(w, r.Body, maxBody)
		ctx, cancel := context.WithTimeout(r.Context(), s.cfg.QueryTimeout)
		defer cancel()
		r = r.WithContext(ctx)
		open := r.URL.Path == "/login" || strings.HasPrefix(r.URL.Path, "/static/")
		if !open {
			p, ok, status := s.authenticate(r)
			if !ok {
				if status == http.StatusTooManyRequests {
					s.fail(w, r, status, "too many failed logins from your address; wait and try again")
					return
				}
				w.Header().Set("WWW-Authenticate", `Bearer realm="kfsdb console"`)
				s.fail(w, r, http.StatusUnauthorized, "log in first: open the login link the console printed, or send Authorization: Bearer TOKEN")
				return
			}
			r = r.WithContext(context.WithValue(r.Context(), principalKey{}, p))
		}
		if r.Method == http.MethodPost {
			if !s.sameOrigin(r) {
				s.usePresentedOnce(r, time.Now()) // a refused POST burns the code too
				s.fail(w, r, http.StatusForbidden, "cross-origin form posts are refused (a POST must carry Origin or Sec-Fetch-Site: same-origin)")
				return
			}
			if err := r.ParseForm(); err != nil {
				var tooBig *http.MaxBytesError
				if errors.As(err, &tooBig) {
					s.fail(w, r, http.StatusRequestEntityTooLarge, "the form is too large")
					return
				}
				s.fail(w, r, http.StatusBadRequest, "the form cannot be read")
				return
			}
			if s.cfg.ReadOnly && !open && r.URL.Path != "/logout" {
				s.fail(w, r, http.StatusForbidden, "this console is read-only")
				return
			}
		}
		next.ServeHTTP(w, r)
	})
}

// authenticate finds r's principal: a bearer token (a wrong one counts
// as a failed login, a right one always passes) or a live session cookie.
// status is 429 for a wrong token from a client the throttle locked.
func (s *Server) authenticate(r *http.Request) (principal, bool, int) {
	if bearerToken(r) {
		if httpguard.BearerMatches(r, s.cfg.AuthToken) {
			return principal{key: "bearer"}, true, 0
		}
		return principal{}, false, s.refuse(r, "wrong bearer token")
	}
	c, err := r.Cookie(s.cookieName(r))
	if err != nil {
		return principal{}, false, http.StatusUnauthorized
	}
	key, ok := s.sessions.valid(c.Value, time.Now())
	if !ok {
		return principal{}, false, http.StatusUnauthorized
	}
	return principal{key: key}, true, 0
}

// fromTrustedProxy says whether r's peer is a proxy --trusted-proxy names.
func (s *Server) fromTrustedProxy(r *http.Request) bool {
	peer, err := netip.ParseAddrPort(r.RemoteAddr)
	if err != nil {
		return false
	}
	for _, p := range s.cfg.TrustedProxies {
		if p.Contains(peer.Addr().Unmap()) {
			return true
		}
	}
	return false
}

// proxyHop is what a trusted proxy said about r (httpguard.LastHop: the
// last element of Forwarded or X-Forwarded-*, the one it appended); ok is
// false from any other peer, and when the proxy's headers are malformed
// or disagree: then none of them is believed.
func (s *Server) proxyHop(r *http.Request) (hop httpguard.Hop, ok bool) {
	if !s.fromTrustedProxy(r) {
		return httpguard.Hop{}, false
	}
	hop, err := httpguard.LastHop(r.Header)
	return hop, err == nil
}

// tls says whether the browser's side of r is HTTPS: the console's own
// TLS, or a trusted proxy's (proto https in its element of Forwarded or
// X-Forwarded-Proto).
func (s *Server) tls(r *http.Request) bool {
	if r.TLS != nil {
		return true
	}
	hop, ok := s.proxyHop(r)
	return ok && hop.Proto == "https"
}

func (s *Server) cookieName(r *http.Request) string {
	if s.tls(r) {
		return secureCookieName
	}
	return cookieName
}

// clientAddr is the address failed logins are counted by: the peer's IP,
// or, from a trusted proxy, the client address it appended (Forwarded's
// for= or X-Forwarded-For's last address).
func (s *Server) clientAddr(r *http.Request) string {
	peer, err := netip.ParseAddrPort(r.RemoteAddr)
	if err != nil {
		return r.RemoteAddr
	}
	if hop, ok := s.proxyHop(r); ok && hop.For.IsValid() {
		return hop.For.String()
	}
	return peer.Addr().String()
}

// forwardedFor is what proxies said about r's client, for audit lines.
func forwardedFor(r *http.Request) string {
	return strings.Join(append(r.Header.Values("Forwarded"), r.Header.Values("X-Forwarded-For")...), ", ")
}

// sameOrigin accepts a POST whose Origin is the console's own (scheme and
// host, the host a trusted proxy forwarded in Forwarded's host= or
// X-Forwarded-Host when it did), or, without Origin, that says
// Sec-Fetch-Site: same-origin. A POST with neither is refused: every
// browser sends one of them.
func (s *Server) sameOrigin(r *http.Request) bool {
	origin := r.Header.Get("Origin")
	if origin == "" {
		return r.Header.Get("Sec-Fetch-Site") == "same-origin"
	}
	u, err := url.Parse(origin)
	if err != nil {
		return false
	}
	host, scheme := r.Host, "http"
	if hop, ok := s.proxyHop(r); ok && hop.Host != "" {
		host = hop.Host
	}
	if s.tls(r) {
		scheme = "https"
	}
	return u.Scheme == scheme && u.Host == host
}

// mac is the hex HMAC-SHA256 of parts under the process's secret.
func (s *Server) mac(parts ...string) string {
	h := hmac.New(sha256.New, s.csrfKey)
	for _, p := range parts {
		h.Write([]byte(p))
		h.Write([]byte{0})
	}
	return hex.EncodeToString(h.Sum(nil))
}

// csrfToken binds an action form to the session, one attempt of one
// tenant at one row version, one action and a deadline: "UNIX.MAC".
func (s *Server) csrfToken(p principal, tenant, attemptID, action string, version int32, now time.Time) string {
	return s.sign(now, "csrf", p.key, tenant, attemptID, action, strconv.Itoa(int(version)))
}

func (s *Server) csrfValid(token string, p principal, tenant, attemptID, action string, version int32, now time.Time) bool {
	return s.signedValid(token, now, "csrf", p.key, tenant, attemptID, action, strconv.Itoa(int(version)))
}

// sign is a form token binding parts until now + csrfTTL: "UNIX.MAC",
// the MAC over parts and the deadline.
func (s *Server) sign(now time.Time, parts ...string) string {
	deadline := strconv.FormatInt(now.Add(csrfTTL).Unix(), 10)
	return deadline + "." + s.mac(append(parts, deadline)...)
}

// signedValid says whether token is sign's for parts and not past its
// deadline at now.
func (s *Server) signedValid(token string, now time.Time, parts ...string) bool {
	deadline, mac, ok := strings.Cut(token, ".")
	if !ok {
		return false
	}
	unix, err := strconv.ParseInt(deadline, 10, 64)
	if err != nil || !now.Before(time.Unix(unix, 0)) {
		return false
	}
	return hmac.Equal([]byte(mac), []byte(s.mac(append(parts, deadline)...)))
}

// loginPage is the login page's data.
type loginPage struct {
	Once      string // a one-time code to submit with a button
	Generated bool   // the console made its token: only its link logs in
	Wrong     bool
}

// loginForm shows the login form. A token in the URL (?token=) is never
// accepted: URLs end up in histories and proxies' logs. A one-time link's
// code (?once=) is shown as a button that posts it.
func (s *Server) loginForm(w http.ResponseWriter, r *http.Request) {
	s.render(w, r, http.StatusOK, "login", "Log in", loginPage{Once: r.URL.Query().Get("once"), Generated: s.generated})
}

// login checks a posted token or one-time code and starts a session. A
// right one always logs in; a wrong one is counted per client and
// audited (one line, rate-limited): past the free tries the client is
// told to wait (429).
func (s *Server) login(w http.ResponseWriter, r *http.Request) {
	now := time.Now()
	onceOK := s.usePresentedOnce(r, now) // before any refusal: it burns the code
	token := r.PostFormValue("token")
	ok := token != "" && subtle.ConstantTimeCompare([]byte(token), []byte(s.cfg.AuthToken)) == 1
	ok = ok || onceOK
	if !ok {
		if s.refuse(r, "wrong token or used link") == http.StatusTooManyRequests {
			s.fail(w, r, http.StatusTooManyRequests, "too many failed logins from your address; wait and try again")
			return
		}
		s.render(w, r, http.StatusUnauthorized, "login", "Log in", loginPage{Wrong: true, Generated: s.generated})
		return
	}
	id := s.sessions.create(now, now.Add(s.cfg.SessionTTL))
	secure := s.tls(r)
	http.SetCookie(w, &http.Cookie{Name: s.cookieName(r), Value: id, Path: "/", HttpOnly: true,
		SameSite: http.SameSiteStrictMode, Secure: secure, MaxAge: int(s.cfg.SessionTTL / time.Second)})
	s.audit(r.WithContext(context.WithValue(r.Context(), principalKey{}, principal{key: sessionKey(id)})),
		auditEntry{Action: "login", Result: "applied"})
	http.Redirect(w, r, "/", http.StatusSeeOther)
}

// usePresentedOnce consumes the one-time login code if a POST to /login
// presents it among its once= values, whatever else the request carries
// and whether or not it is then refused (cross-origin, rate-limited, a
// wrong token beside it): a link is good for one try, so a leaked one
// cannot be tried again after a refusal. It says whether r may log in by
// it: the code was r's one once= value, unused and not expired. A GET of
// the login page (?once=) consumes nothing.
func (s *Server) usePresentedOnce(r *http.Request, now time.Time) bool {
	if r.Method != http.MethodPost || r.URL.Path != "/login" || r.ParseForm() != nil {
		return false
	}
	codes := r.PostForm["once"]
	used := false
	for _, code := range codes {
		used = s.useOnce(code, now) || used
	}
	return used && len(codes) == 1
}

// useOnce consumes the one-time login code, if code is it and it is
// unused and not expired.
func (s *Server) useOnce(code string, now time.Time) bool {
	s.onceMu.Lock()
	defer s.onceMu.Unlock()
	if code == "" || s.once == "" || !now.Before(s.onceExpires) || subtle.ConstantTimeCompare([]byte(code), []byte(s.once)) != 1 {
		return false
	}
	s.once = ""
	return true
}

// logout revokes the session server-side: its cookie is refused from now
// on, even if a copy of it is replayed.
func (s *Server) logout(w http.ResponseWriter, r *http.Request) {
	if p, ok := principalOf(r); ok && p.key != "bearer" {
		s.sessions.revoke(p.key)
	}
	s.audit(r, auditEntry{Action: "logout", Result: "applied"})
	http.SetCookie(w, &http.Cookie{Name: s.cookieName(r), Value: "", Path: "/", MaxAge: -1, HttpOnly: true,
		SameSite: http.SameSiteStrictMode, Secure: s.tls(r)})
	http.Redirect(w, r, "/login", http.StatusSeeOther)
}

// LoginLink is the one-time login path ("/login?once=CODE") of a console
// that made its own token, for its operator to open; "" when the token
// was given, or after the link was used or expired. It logs in once.
func (s *Server) LoginLink() string {
	s.onceMu.Lock()
	defer s.onceMu.Unlock()
	if s.once == "" || !time.Now().Before(s.onceExpires) {
		return ""
	}
	return "/login?" + url.Values{"once": {s.once}}.Encode()
}

// checkTrustedProxies refuses an invalid or over-broad proxy prefix
// (httpguard.CheckTrustedProxy).
func checkTrustedProxies(ps []netip.Prefix) error {
	for _, p := range ps {
		if err := httpguard.CheckTrustedProxy(p); err != nil {
			return fmt.Errorf("%w: TrustedProxies: %w", ErrInvalidConfig, err)
		}
	}
	return nil
}
