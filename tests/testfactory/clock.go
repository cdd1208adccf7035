package testfactory

import (
	"sync"
	"time"
)

// Clock is a manual repo.Clock: every statement sees the time it holds.
// Safe for concurrent use.
type Clock struct {
	mu  sync.Mutex
	now time.Time
}

// NewClock returns a clock at a recent, microsecond-truncated time (the
// precision PostgreSQL stores), so times round-trip exactly.
func NewClock() *Clock {
	return &Clock{now: time.Now().UTC().Truncate(time.Second).Add(-time.Hour)}
}

// ClockAt returns a clock at t: a second actor (a relay, a worker) whose
// time runs ahead of or behind a test's main clock.
func ClockAt(t time.Time) *Clock {
	return &Clock{now: t.UTC()}
}

// NowOrNil implements repo.Clock.
func (c *Clock) NowOrNil() *time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	t := c.now
	return &t
}

// Now returns the clock's time.
func (c *Clock) Now() time.Time { return *c.NowOrNil() }

// Advance moves the clock forward.
func (c *Clock) Advance(d time.Duration) time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
	return c.now
}
