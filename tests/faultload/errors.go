package faultload

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/knowledgefs/kfsdb/repo"
)

// maxExamples bounds the examples a report keeps of one kind of problem.
const maxExamples = 10

// stateSentinels are the errors that report a row's state: a connection
// error must match none of them.
var stateSentinels = []error{
	repo.ErrNotFound, repo.ErrStaleRowVersion, repo.ErrLeaseLost, repo.ErrDeliveryMismatch, repo.ErrDeliveryPending,
	repo.ErrInvalidTransition, repo.ErrHeadConflict, repo.ErrLiveAttemptExists, repo.ErrAttemptsExhausted,
	repo.ErrCandidateRejected, repo.ErrInvalidInput, repo.ErrConstraint, repo.ErrOutboxLockLost,
}

// errorLog counts the errors the run's own calls saw: transient ones
// (repo.IsRetryable), and keeps examples of those that are not, or that
// read as a state.
type errorLog struct {
	transient    atomic.Int64
	mu           sync.Mutex
	nonRetryable examples
	readAsState  examples
}

// add records err, returned by a call made under ctx; an error caused by
// the run's own stop (ctx ended) is not the server's and is ignored.
func (l *errorLog) add(ctx context.Context, err error) {
	if err == nil || ctx.Err() != nil {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if !repo.IsRetryable(err) {
		l.nonRetryable.add(err.Error())
		return
	}
	l.transient.Add(1)
	if s := ReadsAsState(err); s != nil {
		l.readAsState.add(fmt.Sprintf("%v (matches %v)", err, s))
	}
}

// examples counts occurrences and keeps the first few.
type examples struct {
	N     int
	First []string
}

func (e *examples) add(s string) {
	e.N++
	if len(e.First) < maxExamples {
		e.First = append(e.First, s)
	}
}

func (e *examples) addf(format string, args ...any) { e.add(fmt.Sprintf(format, args...)) }

// ReadsAsState returns the state sentinel err matches (repo.ErrNotFound,
// repo.ErrLeaseLost, …), or nil: a connection error must match none.
func ReadsAsState(err error) error {
	for _, s := range stateSentinels {
		if errors.Is(err, s) {
			return s
		}
	}
	return nil
}
