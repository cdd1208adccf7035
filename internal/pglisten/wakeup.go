// Package pglisten holds one pooled connection in LISTEN on the outbox's
// wake-up channel and keeps the earliest due time the notifications
// announced. The relay and the PostgreSQL source both sleep on it.
package pglisten

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"
)

// Channel is the channel on which a commit that made an outbox row due
// notifies idle listeners (migration 0007's trigger); the payload is the
// row's due time, followed since migration 0010 by "|" and the id of the
// one listener it wakes (ParsePayload).
const Channel = "kfsdb_outbox"

// Wakeup keeps the earliest due time announced since its owner last
// looked, so that a due-now notification is never lost behind a later one.
type Wakeup struct {
	mu  sync.Mutex
	due time.Time // zero: none pending
	// kind is what noted the pending due time: WokeNamed, or WokeAll when
	// anything else did.
	kind Woke
	// taken: a notification named the owner, so the commit took its idle
	// registration out (migration 0010); the owner registers again.
	taken bool
	// C receives a value when a due time is noted (at most one pending).
	C chan struct{}
}

// NewWakeup returns an empty Wakeup.
func NewWakeup() *Wakeup { return &Wakeup{C: make(chan struct{}, 1)} }

// Note records a due time and pokes C.
func (w *Wakeup) Note(due time.Time) { w.note(due, WokeAll) }

func (w *Wakeup) note(due time.Time, kind Woke) {
	w.mu.Lock()
	if w.due.IsZero() || due.Before(w.due) {
		w.due = due
	}
	w.kind = max(w.kind, kind)
	w.mu.Unlock()
	select {
	case w.C <- struct{}{}:
	default: // a poke is pending; Take reads the earliest time
	}
}

// NoteTaken records a notification that named the owner: its idle
// registration is gone, and it looks now.
func (w *Wakeup) NoteTaken() {
	w.mu.Lock()
	w.taken = true
	w.mu.Unlock()
	w.note(time.Now(), WokeNamed)
}

// TakeTaken reports, and clears, whether a notification took the owner's
// idle registration since the last call.
func (w *Wakeup) TakeTaken() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	taken := w.taken
	w.taken = false
	return taken
}

// Take returns and clears the earliest due time noted, if any.
func (w *Wakeup) Take() (time.Time, bool) {
	due, _, ok := w.take()
	return due, ok
}

func (w *Wakeup) take() (time.Time, Woke, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	due, kind := w.due, w.kind
	w.due, w.kind = time.Time{}, WokeTimer
	return due, kind, !due.IsZero()
}

// Woke says what ended a Sleep: what caused the look after it.
type Woke int

// In increasing precedence: a sleep ended by a notification that named
// nobody counts as WokeAll whatever else was noted with it.
const (
	// WokeTimer: the deadline passed and no notification came.
	WokeTimer Woke = iota
	// WokeNamed: a notification named the owner (migration 0010).
	WokeNamed
	// WokeAll: a notification that named nobody (every listener woke), or
	// a due time noted otherwise (LISTEN just established).
	WokeAll
)

// Sleep waits until deadline, or until a notification says a row is due
// (now, or before the deadline: then until that time), or ctx ends, and
// says which ended it.
func (w *Wakeup) Sleep(ctx context.Context, timer *time.Timer, deadline time.Time) (Woke, error) {
	woke := WokeTimer
	for {
		if due, kind, ok := w.take(); ok {
			if !due.After(time.Now()) {
				return kind, nil
			}
			if due.Before(deadline) {
				deadline, woke = due, kind
			}
		}
		timer.Reset(time.Until(deadline))
		select {
		case <-ctx.Done():
			timer.Stop()
			return woke, ctx.Err()
		case <-timer.C:
			return woke, nil
		case <-w.C:
			timer.Stop()
		}
	}
}

// ParseDue reads a notification payload: a timestamptz in PostgreSQL's
// text form.
func ParseDue(s string) (time.Time, error) {
	for _, layout := range []string{"2006-01-02 15:04:05.999999-07", "2006-01-02 15:04:05.999999-07:00", "2006-01-02 15:04:05-07"} {
		if t, err := time.Parse(layout, s); err == nil {
			return t, nil
		}
	}
	return time.Time{}, fmt.Errorf("unparsable due time %q", s)
}

// ParsePayload reads a notification payload: the row's due time, and the
// listener it wakes after a "|" (migration 0010), empty when it wakes
// every listener (migration 0007's payload, or a commit that found only
// registrations other transactions held).
func ParsePayload(s string) (due time.Time, listener string, err error) {
	s, listener, _ = strings.Cut(s, "|")
	due, err = ParseDue(s)
	return due, listener, err
}
