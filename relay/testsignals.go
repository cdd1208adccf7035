package relay

import "github.com/knowledgefs/kfsdb/internal/testsignal"

// TestSignals report relay events to tests. They are for tests only and
// do nothing until a test initializes them (Init), so production pays one
// nil check per event.
type TestSignals struct {
	// BatchDone carries the number of rows of each claimed batch once
	// they are all marked or released.
	BatchDone testsignal.Signal[int]
	// Listening fires once LISTEN is in place.
	Listening testsignal.Signal[struct{}]
}

// TestSignals returns the relay's test signals, for tests only. A test
// initializes the signals it waits on after New and before Run; they are
// not safe to initialize while Run or RunOnce is running. It returns nil
// for a nil Relay.
func (r *Relay) TestSignals() *TestSignals {
	if r == nil {
		return nil
	}
	return &r.testSignals
}
