package console

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"sync"
	"time"
)

// Bounds of the session store and the login limiter: memory stays bounded
// whatever a client sends.
const (
	maxSessions = 1024
	// loginFailures failed logins (or wrong bearer tokens) from one
	// address within loginWindow make it wait for the window's end (429).
	loginFailures = 10
	loginWindow   = 10 * time.Minute
	// Every address together gets at most globalFailures a minute.
	globalFailures = 100
	maxLimited     = 4096
	// oneTimeTTL is how long the login link a tokenless console prints
	// stays valid, if it is not used first.
	oneTimeTTL = 30 * time.Minute
)

// randomID is 32 random bytes, base64url without padding.
func randomID() string {
	b := make([]byte, 32)
	_, _ = rand.Read(b) // never fails (crypto/rand panics instead)
	return base64.RawURLEncoding.EncodeToString(b)
}

// sessionKey is what the store keys a session by: a hash of its id, so
// that map lookups leak no timing about the id itself. Its first 12
// characters name the session in audit lines.
func sessionKey(id string) string {
	h := sha256.Sum256([]byte(id))
	return hex.EncodeToString(h[:])
}

// session is one login.
type session struct {
	expires time.Time
}

// sessions is the server-side session store: a cookie is only as good as
// its entry here, which logout deletes and expiry ends.
type sessions struct {
	mu sync.Mutex
	m  map[string]session // by sessionKey
}

// create stores a new session until expires and returns its id (the
// cookie's value). A full store drops expired sessions, then the one
// nearest its end.
func (s *sessions) create(now, expires time.Time) string {
	id := randomID()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.m == nil {
		s.m = map[string]session{}
	}
	if len(s.m) >= maxSessions {
		var first string
		for k, v := range s.m {
			if !v.expires.After(now) {
				delete(s.m, k)
			} else if first == "" || v.expires.Before(s.m[first].expires) {
				first = k
			}
		}
		if len(s.m) >= maxSessions {
			delete(s.m, first)
		}
	}
	s.m[sessionKey(id)] = session{expires: expires}
	return id
}

// valid says whether id is a live session, and returns its key.
func (s *sessions) valid(id string, now time.Time) (string, bool) {
	if id == "" {
		return "", false
	}
	key := sessionKey(id)
	s.mu.Lock()
	defer s.mu.Unlock()
	v, ok := s.m[key]
	if ok && !v.expires.After(now) {
		delete(s.m, key)
		ok = false
	}
	return key, ok
}

// revoke ends a session.
func (s *sessions) revoke(key string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.m, key)
}

// limiter counts failed logins per client address and in all.
type limiter struct {
	mu          sync.Mutex
	byAddr      map[string]*failures
	global      failures
	globalLimit int
}

type failures struct {
	n     int
	since time.Time
}

// count returns f's failures in the window that contains now, starting a
// new window when the last one is over.
func (f *failures) count(now time.Time, window time.Duration) int {
	if now.Sub(f.since) >= window {
		f.n, f.since = 0, now
	}
	return f.n
}

// blocked says whether addr (or everyone) has failed too often lately.
func (l *limiter) blocked(addr string, now time.Time) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.global.count(now, time.Minute) >= l.globalLimit {
		return true
	}
	f := l.byAddr[addr]
	return f != nil && f.count(now, loginWindow) >= loginFailures
}

// fail counts one failure of addr.
func (l *limiter) fail(addr string, now time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.byAddr == nil {
		l.byAddr = map[string]*failures{}
	}
	l.global.count(now, time.Minute)
	l.global.n++
	f := l.byAddr[addr]
	if f == nil {
		if len(l.byAddr) >= maxLimited {
			for k, v := range l.byAddr {
				if now.Sub(v.since) >= loginWindow {
					delete(l.byAddr, k)
				}
			}
			if len(l.byAddr) >= maxLimited {
				return // the global limit still applies
			}
		}
		f = &failures{since: now}
		l.byAddr[addr] = f
	}
	f.count(now, loginWindow)
	f.n++
}
