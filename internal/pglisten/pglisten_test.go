package pglisten

import (
	"testing"
	"time"
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
