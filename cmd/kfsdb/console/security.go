package console

import (
	"crypto/hmac"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"net"
	"net/http"
	"net/url"
	"strings"
)

// cookieName is the login cookie: an HMAC of the token, never the token.
const cookieName = "kfsdb_console"

// headers every response carries: no script, no framing, nothing cached
// (pages hold CSRF tokens and, after /login?token=, the URL a token).
var securityHeaders = map[string]string{
	"Content-Security-Policy": "default-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'",
	"X-Frame-Options":         "DENY",
	"X-Content-Type-Options":  "nosniff",
	// same-origin, not no-referrer: under no-referrer browsers send
	// "Origin: null" on the console's own form posts, which sameOrigin
	// refuses; other sites still get no Referer (no /login?token= leak).
	"Referrer-Policy": "same-origin",
	"Cache-Control":   "no-store",
}

// secure applies the checks every request goes through, in order: a
// loopback Host when there is no token (DNS rebinding), the token, the
// read-only switch, and a same-origin CSRF token on every POST.
func (s *Server) secure(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		for k, v := range securityHeaders {
			w.Header().Set(k, v)
		}
		if s.cfg.AuthToken == "" && !hostIsLoopback(r.Host) {
			s.fail(w, r, http.StatusForbidden, "this console has no token, so it only answers requests addressed to localhost")
			return
		}
		login := r.URL.Path == "/login"
		if !login && r.URL.Path != "/logout" && !strings.HasPrefix(r.URL.Path, "/static/") && !s.authorized(r) {
			w.Header().Set("WWW-Authenticate", `Bearer realm="kfsdb console"`)
			s.fail(w, r, http.StatusUnauthorized, "a token is required: send Authorization: Bearer TOKEN, or log in at /login")
			return
		}
		if r.Method == http.MethodPost && !login {
			if s.cfg.ReadOnly && r.URL.Path != "/logout" {
				s.fail(w, r, http.StatusForbidden, "this console is read-only")
				return
			}
			if !sameOrigin(r) {
				s.fail(w, r, http.StatusForbidden, "cross-origin form posts are refused")
				return
			}
		}
		next.ServeHTTP(w, r)
	})
}

// authorized says whether r carries the token (or its login cookie); any
// request is authorized when the console has no token.
func (s *Server) authorized(r *http.Request) bool {
	if s.cfg.AuthToken == "" {
		return true
	}
	if auth, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer "); ok {
		return subtle.ConstantTimeCompare([]byte(auth), []byte(s.cfg.AuthToken)) == 1
	}
	if c, err := r.Cookie(cookieName); err == nil {
		return subtle.ConstantTimeCompare([]byte(c.Value), []byte(s.cookieVal)) == 1
	}
	return false
}

// hostIsLoopback says whether a Host header names this host: localhost or
// a loopback IP, with or without a port.
func hostIsLoopback(host string) bool {
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

// sameOrigin refuses a POST whose Origin (sent by browsers on form posts)
// names another host; requests without Origin (curl) rely on the CSRF
// token alone.
func sameOrigin(r *http.Request) bool {
	origin := r.Header.Get("Origin")
	if origin == "" {
		return true
	}
	u, err := url.Parse(origin)
	return err == nil && u.Host == r.Host
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

// csrfToken binds an action form to one attempt of one tenant and one
// action: a token taken from one form is useless on any other.
func (s *Server) csrfToken(tenant, attemptID, action string) string {
	return s.mac("csrf", tenant, attemptID, action)
}

func (s *Server) csrfValid(token, tenant, attemptID, action string) bool {
	return hmac.Equal([]byte(token), []byte(s.csrfToken(tenant, attemptID, action)))
}

// loginForm shows the login form (GET /login), or sets the login cookie
// for a right token given as ?token= or in the form, then goes to the
// overview.
func (s *Server) loginForm(w http.ResponseWriter, r *http.Request) {
	token := r.URL.Query().Get("token")
	if r.Method == http.MethodPost {
		token = r.PostFormValue("token")
	}
	if token == "" || s.cfg.AuthToken == "" {
		s.render(w, r, http.StatusOK, "login", "Log in", map[string]any{"NoToken": s.cfg.AuthToken == ""})
		return
	}
	if subtle.ConstantTimeCompare([]byte(token), []byte(s.cfg.AuthToken)) != 1 {
		s.render(w, r, http.StatusUnauthorized, "login", "Log in", map[string]any{"Wrong": true})
		return
	}
	http.SetCookie(w, &http.Cookie{Name: cookieName, Value: s.cookieVal, Path: "/", HttpOnly: true,
		SameSite: http.SameSiteStrictMode, Secure: r.TLS != nil})
	http.Redirect(w, r, "/", http.StatusSeeOther)
}

func (s *Server) logout(w http.ResponseWriter, r *http.Request) {
	http.SetCookie(w, &http.Cookie{Name: cookieName, Value: "", Path: "/", MaxAge: -1, HttpOnly: true, SameSite: http.SameSiteStrictMode})
	http.Redirect(w, r, "/login", http.StatusSeeOther)
}
