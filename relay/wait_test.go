package relay

import (
	"testing"
	"time"
)

// A due-now notification must not be lost behind a later one: the relay
// keeps the earliest announced time until it looks.
func TestWakeupKeepsEarliestDue(t *testing.T) {
	w := newWakeup()
	now := time.Now()
	w.note(now.Add(time.Minute)) // a retry due in a minute
	w.note(now)                  // a Start due now
	w.note(now.Add(time.Hour))
	select {
	case <-w.ch:
	default:
		t.Fatal("no wake-up pending")
	}
	due, ok := w.take()
	if !ok || !due.Equal(now) {
		t.Fatalf("take() = %v, %v; want %v, true", due, ok, now)
	}
	if _, ok := w.take(); ok {
		t.Fatal("take() after take() must report nothing pending")
	}
}
