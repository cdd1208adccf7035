// Package testsignal lets tests wait for a runtime event instead of
// sleeping. A Signal does nothing until a test calls Init, so production
// pays one nil check per event.
package testsignal

import "time"

// TB is the part of testing.TB a Signal uses (so production code does not
// import package testing).
type TB interface {
	Helper()
	Fatalf(format string, args ...any)
}

// Signal carries values of type T from the runtime to a test.
type Signal[T any] struct {
	ch chan T
}

// Init enables the signal with room for many unread values.
func (s *Signal[T]) Init() { s.ch = make(chan T, 1000) }

// Signal records v if the signal was initialized; it never blocks.
func (s *Signal[T]) Signal(v T) {
	if s.ch == nil {
		return
	}
	select {
	case s.ch <- v:
	default:
	}
}

// WaitOrTimeout returns the next value, failing the test after timeout.
func (s *Signal[T]) WaitOrTimeout(t TB, timeout time.Duration) T {
	t.Helper()
	select {
	case v := <-s.ch:
		return v
	case <-time.After(timeout):
		t.Fatalf("testsignal: no signal within %s", timeout)
		var zero T
		return zero
	}
}

// C exposes the channel for select statements; nil before Init.
func (s *Signal[T]) C() <-chan T { return s.ch }
