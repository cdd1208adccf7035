package pglisten

import (
	"context"
	"errors"
	"log/slog"
	"slices"
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

// Sleep says what ended it, so a source can count why it looked: its
// timer, a notification naming it, or one naming nobody (which wins over
// a name noted with it: the whole fleet was woken). A notification due
// later than now but before the deadline ends the sleep at its time, as
// a notification. Mutation caught: Sleep reporting WokeTimer, or the kind
// of the first notification only.
func TestSleepSaysWhatWokeIt(t *testing.T) {
	ctx := context.Background()
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	sleep := func(w *Wakeup, deadline time.Time) Woke {
		t.Helper()
		woke, err := w.Sleep(ctx, timer, deadline)
		if err != nil {
			t.Fatal(err)
		}
		return woke
	}
	w := NewWakeup()
	if got := sleep(w, time.Now().Add(time.Millisecond)); got != WokeTimer {
		t.Fatalf("nothing noted: %v, want WokeTimer", got)
	}
	w.NoteTaken()
	if got := sleep(w, time.Now().Add(time.Hour)); got != WokeNamed {
		t.Fatalf("named: %v, want WokeNamed", got)
	}
	w.NoteTaken()
	w.Note(time.Now())
	if got := sleep(w, time.Now().Add(time.Hour)); got != WokeAll {
		t.Fatalf("named, then everyone: %v, want WokeAll", got)
	}
	w.Note(time.Now().Add(5 * time.Millisecond))
	if got := sleep(w, time.Now().Add(time.Hour)); got != WokeAll {
		t.Fatalf("a row due in 5 ms: %v, want WokeAll", got)
	}
	if got := sleep(w, time.Now().Add(time.Millisecond)); got != WokeTimer {
		t.Fatalf("after a take: %v, want WokeTimer", got)
	}
}

// A new registration is followed by a look once more that sees every
// commit that checked before it: the registration read again (a refresh,
// a statement of its own after it committed). The owner sleeps only when
// that second reading is a plain refresh with no row due; otherwise it
// fetches, as it always did. Mutations caught: no second reading (the
// owner sleeps on the first answer, which a commit just before it may
// have outdated), the second reading's due row ignored, a second
// registration (a commit took the first in between) taken as a refresh.
func TestNewRegistrationLooksOnceMore(t *testing.T) {
	ctx := context.Background()
	in := func(d time.Duration) *time.Duration { return &d }
	inserted := &repo.OutboxListenerIdleResult{Registered: true, Inserted: true}
	for _, c := range []struct {
		name   string
		second *repo.OutboxListenerIdleResult
		err    error
		fetch  bool
	}{
		{name: "nothing due: sleep", second: &repo.OutboxListenerIdleResult{Registered: true}},
		{name: "a row due later: sleep", second: &repo.OutboxListenerIdleResult{Registered: true, NextDueIn: in(time.Minute)}},
		{name: "a row due now: fetch", second: &repo.OutboxListenerIdleResult{Registered: true, NextDueIn: in(0)}, fetch: true},
		{name: "registered anew: fetch", second: &repo.OutboxListenerIdleResult{Registered: true, Inserted: true}, fetch: true},
		{name: "refused: fetch", second: &repo.OutboxListenerIdleResult{}, fetch: true},
		{name: "failed: fetch", err: errors.New("connection lost"), fetch: true},
	} {
		var calls []*repo.OutboxListenerIdleResult
		answers := []*repo.OutboxListenerIdleResult{inserted, c.second}
		p := &IdleParams{PollInterval: time.Second, FollowUp: 20 * time.Millisecond, Listening: true, Log: slog.New(slog.DiscardHandler),
			register: func(context.Context) (*repo.OutboxListenerIdleResult, error) {
				res := answers[len(calls)]
				calls = append(calls, res)
				if len(calls) == 2 && c.err != nil {
					return nil, c.err
				}
				return res, nil
			}}
		var w Idle
		wait, again := w.Next(ctx, p)
		if len(calls) != 2 {
			t.Errorf("%s: %d readings of the registration, want 2 (the registration, then the look once more)", c.name, len(calls))
		}
		if again != c.fetch || !again && wait <= 0 || again && !w.OnceMore() {
			t.Errorf("%s: Next = %v, %v (once more %v); want a fetch %v, the look once more", c.name, wait, again, w.OnceMore(), c.fetch)
		}
	}
}

// With LookBeforeRetry, a due row a refresh reports is looked at again
// with the registration after each retry wait, not fetched; fetched once
// it is still due past the follow-up wait; forgotten when a look finds it
// gone; fetched once only (a row still due after that is a fetch's in
// flight); not retried at all when the refresh follows an idle poll. A notification during a retry wait, a refused registration and a
// new registration's due row are fetched at once. Mutations caught: no
// look before the retry's fetch (SkipFetch false), a row still due never
// fetched (the liveness of a due row nobody woke anybody for), a refused
// registration waiting for the lock without fetching, a poll's refresh
// that starts retries for a row another listener was woken for, retries
// at the follow-up pace while rows keep coming due.
func TestLookBeforeRetry(t *testing.T) {
	ctx := context.Background()
	in := func(d time.Duration) *time.Duration { return &d }
	due := &repo.OutboxListenerIdleResult{Registered: true, NextDueIn: in(0)}
	idle := &repo.OutboxListenerIdleResult{Registered: true}
	params := func(answers ...*repo.OutboxListenerIdleResult) (*IdleParams, *int) {
		n := new(int)
		return &IdleParams{PollInterval: time.Second, FollowUp: 20 * time.Millisecond, Listening: true, LookBeforeRetry: true,
			Log: slog.New(slog.DiscardHandler),
			register: func(context.Context) (*repo.OutboxListenerIdleResult, error) {
				res := answers[min(*n, len(answers)-1)]
				*n++
				return res, nil
			}}, n
	}

	// A refresh reports a due row for the whole backoff: looks (1, 2, 4,
	// 8, 16, 20 ms waits), then a fetch.
	p, readings := params(due)
	var w Idle
	var waits []time.Duration
	for {
		wait, again := w.Next(ctx, p)
		if again {
			break
		}
		waits = append(waits, wait)
		if !w.SkipFetch(WokeTimer) {
			t.Fatalf("retry wait %v ran out: want a look before any fetch", wait)
		}
		if len(waits) > 10 {
			t.Fatal("a row still due past the follow-up wait is never fetched")
		}
	}
	want := []time.Duration{time.Millisecond, 2 * time.Millisecond, 4 * time.Millisecond, 8 * time.Millisecond, 16 * time.Millisecond, 20 * time.Millisecond}
	if !slices.Equal(waits, want) || *readings != len(want)+1 || w.OnceMore() {
		t.Fatalf("waits %v, %d readings, once more %v; want %v, %d readings, a retry's fetch", waits, *readings, w.OnceMore(), want, len(want)+1)
	}
	// That fetch found nothing: the row is a fetch's in flight; sleep
	// until the next poll, no more retries.
	if wait, again := w.Next(ctx, p); again || wait != time.Second || w.SkipFetch(WokeTimer) || *readings != len(want)+1 {
		t.Fatalf("after the retry's empty fetch: %v, %v, %d readings; want the poll interval, no reading", wait, again, *readings)
	}

	// Gone at the second look: sleep, no fetch.
	p, _ = params(due, idle)
	w = Idle{}
	if wait, again := w.Next(ctx, p); again || !w.SkipFetch(WokeTimer) {
		t.Fatalf("first reading: %v, %v; want a retry wait and a look", wait, again)
	}
	if wait, again := w.Next(ctx, p); again || wait != time.Second || w.SkipFetch(WokeTimer) {
		t.Fatalf("the row gone: %v, %v; want the poll interval, no look", wait, again)
	}

	// A notification during the retry wait: fetch.
	p, _ = params(due)
	w = Idle{}
	w.Next(ctx, p)
	if w.SkipFetch(WokeNamed) {
		t.Fatal("a notification ended the retry wait: want a fetch")
	}

	// Refused: fetch after the wait, as without LookBeforeRetry.
	p, _ = params(&repo.OutboxListenerIdleResult{})
	w = Idle{}
	if _, again := w.Next(ctx, p); again || w.SkipFetch(WokeTimer) {
		t.Fatal("a refused registration: want a fetch after the retry wait")
	}

	// A refresh after an idle poll reports a due row: no retries, sleep
	// until the next poll (the row is a woken listener's); a new
	// registration after it still fetches the row at once.
	p, _ = params(due)
	w = Idle{}
	w.Polled()
	if wait, again := w.Next(ctx, p); again || wait != time.Second || w.SkipFetch(WokeTimer) {
		t.Fatalf("a poll's refresh with a due row: %v, %v; want the poll interval, no look", wait, again)
	}
	p, _ = params(&repo.OutboxListenerIdleResult{Registered: true, Inserted: true}, due)
	w = Idle{}
	w.Polled()
	if _, again := w.Next(ctx, p); !again || !w.OnceMore() {
		t.Fatal("a poll's new registration with a due row: want the look once more's fetch")
	}

	// Without LookBeforeRetry: fetch after every retry wait.
	p, _ = params(due)
	p.LookBeforeRetry = false
	w = Idle{}
	if _, again := w.Next(ctx, p); again || w.SkipFetch(WokeTimer) {
		t.Fatal("LookBeforeRetry unset: want a fetch after the retry wait")
	}
}
