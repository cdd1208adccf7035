package worker

import "github.com/knowledgefs/kfsdb/internal/testsignal"

// TestSignals report worker events to tests. They are for tests only and
// do nothing until a test initializes them (Init), so production pays one
// nil check per event.
type TestSignals struct {
	// Processed carries each delivery's result once it was acknowledged or
	// handed back.
	Processed testsignal.Signal[Result]
	// Stopping fires when a Run stops taking deliveries (its stop began).
	Stopping testsignal.Signal[struct{}]
}

// TestSignals returns the worker's test signals, for tests only. A test
// initializes the signals it waits on after New and before Run; they are
// not safe to initialize while Run or Process is running. It returns nil
// for a nil Worker.
func (w *Worker) TestSignals() *TestSignals {
	if w == nil {
		return nil
	}
	return &w.testSignals
}
