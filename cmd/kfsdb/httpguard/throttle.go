package httpguard

import (
	"net/netip"
	"sync"
	"time"
)

// The throttle's rule: a client's first ThrottleFree wrong tokens cost
// nothing; each one after locks it for ThrottleBase, doubled per failure,
// up to ThrottleMax; its count drops by one per ThrottleDecay without a
// failure. ThrottleMaxClients bounds the clients tracked.
const (
	ThrottleFree       = 5
	ThrottleBase       = time.Second
	ThrottleMax        = 5 * time.Minute
	ThrottleDecay      = time.Minute
	ThrottleMaxClients = 4096
)

// ThrottleOptions configures NewThrottle.
type ThrottleOptions struct {
	// Now is the clock. Defaults to time.Now.
	Now func() time.Time
	// MaxClients bounds the clients tracked. Defaults to
	// ThrottleMaxClients.
	MaxClients int
	// LogBurst is how many refusals a window may log, LogWindow the
	// window. Default to RefusalLogBurst and RefusalLogWindow.
	LogBurst  int
	LogWindow time.Duration
}

// Throttle counts wrong tokens per client (an address) and makes a
// client that keeps guessing wait longer and longer; it also bounds how
// many of those refusals are logged. One Throttle serves a process's
// console and its /metrics. Safe for concurrent use.
//
// It never locks anyone out of the right token: callers compare the
// token first, in constant time, accept a right one whatever the
// throttle says, and only count a wrong one (answered 429 while its
// client is locked, else 401). The client is an address, and one
// address can be the operator's and a guesser's at once (every client of
// a proxy the console was not told to trust, a NAT, a DNS-rebinding page
// in the operator's own browser): refusing the right token from a locked
// address would let any stranger lock the operator out, which is what
// the global and per-address lockouts this replaced did. The price: a
// guesser who ignores 429 still learns whether each guess is right, so
// what stops guessing is the token's strength (CheckToken: MinTokenBits,
// 2^128 guesses), not the throttle; the throttle makes clients that obey
// 429 back off, gives guessing a visible answer and bounds the log.
type Throttle struct {
	now        func() time.Time
	maxClients int

	mu      sync.Mutex
	clients map[string]*guesser
	lines   lineLimiter
}

// guesser is one client's record: its failures (decayed since last)
// and the end of its lockout.
type guesser struct {
	failures    int
	last, until time.Time
}

// NewThrottle returns a Throttle; opts may be nil.
func NewThrottle(opts *ThrottleOptions) *Throttle {
	var o ThrottleOptions
	if opts != nil {
		o = *opts
	}
	t := &Throttle{now: o.Now, maxClients: o.MaxClients, clients: map[string]*guesser{},
		lines: lineLimiter{burst: o.LogBurst, window: o.LogWindow}}
	if t.now == nil {
		t.now = time.Now
	}
	if t.maxClients <= 0 {
		t.maxClients = ThrottleMaxClients
	}
	if t.lines.burst <= 0 {
		t.lines.burst = RefusalLogBurst
	}
	if t.lines.window <= 0 {
		t.lines.window = RefusalLogWindow
	}
	return t
}

// Refusal says how to answer one wrong token and whether to log it.
type Refusal struct {
	// Throttled: the client was locked when the token came: answer 429
	// with Retry-After (RetryAfter, whole seconds rounded up), else 401.
	Throttled  bool
	RetryAfter time.Duration
	// Log: write this refusal's line. Suppressed: first write one line
	// saying that many refusals before it went unlogged (LogSuppressed).
	Log        bool
	Suppressed int
}

// Status is the HTTP status to answer: 429 or 401.
func (r Refusal) Status() int {
	if r.Throttled {
		return 429
	}
	return 401
}

// Fail counts one wrong token from client (an IP address; an IPv6 one is
// counted by its /64, which one host usually holds whole).
func (t *Throttle) Fail(client string) Refusal {
	t.mu.Lock()
	defer t.mu.Unlock()
	now := t.now()
	key := clientKey(client)
	g := t.clients[key]
	if g == nil {
		t.makeRoom(now)
		g = &guesser{}
		t.clients[key] = g
	}
	r := Refusal{Throttled: now.Before(g.until)}
	g.failures = min(g.decayed(now)+1, maxCounted)
	g.last = now
	if g.failures > ThrottleFree {
		g.until = now.Add(lockout(g.failures - ThrottleFree))
		r.RetryAfter = g.until.Sub(now)
	}
	r.Log, r.Suppressed = t.lines.allow(now)
	return r
}

// maxCounted is the most failures a client's record holds, as many as
// it takes to reach ThrottleMax: a guesser that kept trying at the cap is
// forgiven after the same quiet time as one that just got there.
const maxCounted = ThrottleFree + 10

// lockout is the wait after the n-th failure past the free ones.
func lockout(n int) time.Duration {
	return min(ThrottleMax, ThrottleBase<<(n-1))
}

// decayed is g's failures less one per ThrottleDecay since the last.
func (g *guesser) decayed(now time.Time) int {
	return max(0, g.failures-int(now.Sub(g.last)/ThrottleDecay))
}

// makeRoom drops the clients that are forgiven (no failure left, no
// lockout) when the table is full, then, if it still is, the one whose
// last failure is oldest: memory stays bounded whatever addresses a
// client sends from, and nobody else is refused for it.
func (t *Throttle) makeRoom(now time.Time) {
	if len(t.clients) < t.maxClients {
		return
	}
	var oldest string
	for k, g := range t.clients {
		if g.decayed(now) == 0 && !now.Before(g.until) {
			delete(t.clients, k)
		} else if oldest == "" || g.last.Before(t.clients[oldest].last) {
			oldest = k
		}
	}
	if len(t.clients) >= t.maxClients {
		delete(t.clients, oldest)
	}
}

// clientKey is what a client is counted by: its address, an IPv6
// address's /64.
func clientKey(client string) string {
	a, err := netip.ParseAddr(client)
	if err != nil || a.Unmap().Is4() {
		return client
	}
	p, _ := a.Prefix(64)
	return p.String()
}
