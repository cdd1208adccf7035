package faultload

import (
	"context"
	"fmt"
	"time"
)

// waitProgress polls until poll reports done. progress is any measure
// that grows as the run gets on; the wait gives up when it has not grown
// for stall (no progress at all for that long is a hang; a loaded machine
// that is only slow is not), or when ctx ends. A poll that fails (the
// server is down) reports ok false and counts as no progress.
func waitProgress(ctx context.Context, stall time.Duration, poll func(context.Context) (progress int, done, ok bool), what string) error {
	best, seen, deadline := 0, false, time.Now().Add(stall)
	for {
		progress, done, ok := poll(ctx)
		if ok && done {
			return nil
		}
		if ok && (!seen || progress > best) {
			best, seen, deadline = progress, true, time.Now().Add(stall)
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("faultload: %s: no progress for %s (at %d)", what, stall, best)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("faultload: %s: %w", what, ctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
}
