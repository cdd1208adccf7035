package testfactory

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// RunAll runs each function (a relay's or worker's Run) in its own
// goroutine under a child of ctx and returns a stop function that cancels
// it, waits for all of them and requires each returned context.Canceled.
// Stop runs once, at the latest in the test's cleanup.
func RunAll(ctx context.Context, t testing.TB, runs ...func(context.Context) error) (stop func()) {
	t.Helper()
	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan error, len(runs))
	for _, run := range runs {
		go func() { done <- run(runCtx) }()
	}
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			for range runs {
				select {
				case err := <-done:
					require.ErrorIs(t, err, context.Canceled)
				case <-time.After(30 * time.Second):
					require.FailNow(t, "relay or worker did not stop within 30 s")
				}
			}
		})
	}
	t.Cleanup(stop)
	return stop
}
