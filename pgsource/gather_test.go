package pgsource

import (
	"context"
	"testing"
	"time"
)

func TestGather(t *testing.T) {
	requests := make(chan *request, 8)
	// Enough requests: it returns without waiting out the window.
	for range 3 {
		requests <- &request{}
	}
	got := gather(context.Background(), requests, []*request{{}}, 4, time.Hour)
	if len(got) != 4 {
		t.Fatalf("gathered %d, want 4", len(got))
	}
	// Too few: it returns after the window with what came. Both checks
	// hold whatever the scheduling: nothing else sends, and a timer never
	// fires early (a lower bound on the time taken, never an upper one).
	requests <- &request{}
	t0 := time.Now()
	got = gather(context.Background(), requests, nil, 4, 20*time.Millisecond)
	if len(got) != 1 || time.Since(t0) < 20*time.Millisecond {
		t.Fatalf("gathered %d after %v, want 1 after the 20ms window", len(got), time.Since(t0))
	}
	// An ended ctx ends the wait.
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if got = gather(ctx, requests, nil, 4, time.Hour); len(got) != 0 {
		t.Fatalf("gathered %d with an ended ctx", len(got))
	}
}
