package console

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"sync"
	"time"
)

// Bounds of the session store: memory stays bounded whatever a client
// sends.
const (
	maxSessions = 1024
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
