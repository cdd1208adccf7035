package testfactory

import (
	"bytes"
	"sync"
)

// SyncBuffer is a bytes.Buffer that one goroutine can read while others
// write (a subprocess's output, a logger shared by many goroutines). The
// zero value is ready to use. Safe for concurrent use.
type SyncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

// String returns everything written so far.
func (s *SyncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// Write appends p; it never fails.
func (s *SyncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}
