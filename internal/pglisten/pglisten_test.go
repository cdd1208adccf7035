package pglisten

import (
	"testing"
	"time"

	"github.com/knowledgefs/kfsdb/repo"
)

// A due-now notification must not be lost behind a later one: the relay
// keeps the earliest announced time until it looks.
func TestWakeupKeepsEarliestDue(t *testing.T) {
	w := NewWakeup()
	now := time.Now()
	w.Note(now.Add(time.Minute)) // a retry due in a minute
	w.Note(now)                  // a Start due now
	w.Note(now.Add(time.Hour))
	select {
	case <-w.C:
	default:
		t.Fatal("no wake-up pending")
	}
	due, ok := w.Take()
	if !ok || !due.Equal(now) {
		t.Fatalf("Take() = %v, %v; want %v, true", due, ok, now)
	}
	if _, ok := w.Take(); ok {
		t.Fatal("Take() after Take() must report nothing pending")
	}
}

// A direct source skips the refresh of a young registration, never longer
// than until the next due row it was told of, and never once the
// registration is not known to be in place. An hour's poll (a TTL of two
// hours) and a row due in ten minutes: the checks that read the clock
// hold unless the test stalls for minutes between two lines (with a 1 s
// poll and a row due in 200 ms, a 200 ms stall failed "at most until the
// next due row").
func TestIdleTrustsOnlyAFreshRegistration(t *testing.T) {
	p := &IdleParams{PollInterval: time.Hour, TrustFresh: true}
	in := func(d time.Duration) *time.Duration { return &d }

	var w Idle
	if _, ok := w.fresh(p); ok {
		t.Fatal("fresh with no registration")
	}
	w.noteRegistration(&repo.OutboxListenerIdleResult{Registered: true})
	if wait, ok := w.fresh(p); !ok || wait != time.Hour {
		t.Fatalf("fresh = %v, %v; want the poll interval", wait, ok)
	}
	if _, ok := w.fresh(&IdleParams{PollInterval: time.Hour}); ok {
		t.Fatal("fresh without TrustFresh")
	}
	w.noteRegistration(&repo.OutboxListenerIdleResult{Registered: true, NextDueIn: in(10 * time.Minute)})
	if wait, ok := w.fresh(p); !ok || wait > 10*time.Minute || wait <= 0 {
		t.Fatalf("fresh = %v, %v; want at most until the next due row", wait, ok)
	}
	w.noteRegistration(&repo.OutboxListenerIdleResult{Registered: true, NextDueIn: in(-time.Millisecond)})
	if _, ok := w.fresh(p); ok {
		t.Fatal("fresh although a row is due")
	}
	w.noteRegistration(&repo.OutboxListenerIdleResult{Registered: true})
	w.refreshed = time.Now().Add(-p.TTL() / 4)
	if _, ok := w.fresh(p); ok {
		t.Fatal("fresh although the registration is a quarter of its TTL old")
	}
	w.noteRegistration(&repo.OutboxListenerIdleResult{Registered: true})
	w.retry = time.Millisecond
	if _, ok := w.fresh(p); ok {
		t.Fatal("fresh while backing off for a locked row")
	}
	w.Found()
	if _, ok := w.fresh(p); !ok {
		t.Fatal("Found must keep the registration")
	}
	w.Reset()
	if _, ok := w.fresh(p); ok {
		t.Fatal("fresh after Reset (a look that ended the registration)")
	}
	w.noteRegistration(&repo.OutboxListenerIdleResult{Registered: false})
	if _, ok := w.fresh(p); ok {
		t.Fatal("fresh after a refused registration")
	}
}

// A payload names the listener it wakes after a "|" (migration 0010);
// without one (migration 0007's, or a commit that found every
// registration held) it wakes every listener. An id may hold "|" itself.
func TestParsePayload(t *testing.T) {
	for _, c := range []struct {
		payload, listener string
		due               time.Time
		bad               bool
	}{
		{payload: "2026-12-06 17:12:37.651+00", due: time.Date(2026, 12, 6, 17, 12, 37, 651e6, time.UTC)},
		{payload: "2026-12-06 17:12:37.651+00|work-host-1-w0", listener: "work-host-1-w0", due: time.Date(2026, 12, 6, 17, 12, 37, 651e6, time.UTC)},
		{payload: "2026-12-06 17:12:37+00|a|b", listener: "a|b", due: time.Date(2026, 12, 6, 17, 12, 37, 0, time.UTC)},
		{payload: "soon|relay-a", listener: "relay-a", bad: true},
	} {
		due, listener, err := ParsePayload(c.payload)
		if (err != nil) != c.bad || listener != c.listener || (!c.bad && !due.Equal(c.due)) {
			t.Errorf("ParsePayload(%q) = %v, %q, %v; want %v, %q, error %v", c.payload, due, listener, err, c.due, c.listener, c.bad)
		}
	}
}

// A notification that took the owner's registration is remembered until
// the owner asks, once, and wakes it now.
func TestWakeupNoteTaken(t *testing.T) {
	w := NewWakeup()
	if w.TakeTaken() {
		t.Fatal("TakeTaken() before any notification")
	}
	w.NoteTaken()
	if _, ok := w.Take(); !ok {
		t.Fatal("NoteTaken must wake the owner")
	}
	if !w.TakeTaken() || w.TakeTaken() {
		t.Fatal("TakeTaken() must report the taking once")
	}
}

// A source that serves only some tenants (Partial) is told a row is due
// now that its fetch did not take: most likely another tenant's, so it
// sleeps the poll (a commit still wakes it) instead of looking again
// every few milliseconds while that tenant's backlog lasts; a source of
// every tenant takes it for a locked row and looks again soon.
func TestIdlePartialSleepsPastOthersDueRows(t *testing.T) {
	in := func(d time.Duration) *time.Duration { return &d }
	for _, partial := range []bool{false, true} {
		p := &IdleParams{PollInterval: time.Hour, FollowUp: 20 * time.Millisecond, Listening: true, Partial: partial}
		w := Idle{recheck: &repo.OutboxListenerIdleResult{Registered: true, NextDueIn: in(-time.Millisecond)}}
		wait, again := w.Next(t.Context(), p)
		switch {
		case again:
			t.Fatalf("partial=%v: again after a recheck", partial)
		case partial && wait != time.Hour:
			t.Fatalf("partial: wait %v; want the poll interval", wait)
		case !partial && wait > p.FollowUp:
			t.Fatalf("every tenant: wait %v; want at most the follow-up interval", wait)
		}
		// And a row due later still bounds the sleep.
		w = Idle{recheck: &repo.OutboxListenerIdleResult{Registered: true, NextDueIn: in(time.Minute)}}
		if wait, _ := w.Next(t.Context(), p); wait != time.Minute {
			t.Fatalf("partial=%v: wait %v; want until the next due row", partial, wait)
		}
	}
}
