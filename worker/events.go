package worker

import (
	"time"

	"github.com/google/uuid"

	"github.com/knowledgefs/kfsdb/observe"
)

// Event is one outcome the worker recorded, sent to Config.Events: the
// in-process counterpart of River's Subscribe and Oban's telemetry. For
// other processes, the opt-in NOTIFY of package outcomes says when an
// attempt ended, whoever ended it.
type Event struct {
	AttemptID uuid.UUID
	// TenantID is the attempt's tenant ("" when the worker never leased
	// it: an exhausted attempt failed at the lease).
	TenantID string
	// Outcome is what the worker recorded: OutcomeCompleted,
	// OutcomeFailed, OutcomeRetried, OutcomeExhausted, OutcomeReleased and
	// OutcomeAbandoned (handed back by a stop), or OutcomeLeaseLost (the
	// lease was lost while the handler ran or as its outcome was written:
	// nothing was recorded, the attempt is another lease's now).
	Outcome Outcome
	// ErrorCode is the error code recorded (last_error_code), "" for a
	// completion and a lost lease.
	ErrorCode string
	// HandlerDuration is how long the handler ran (until it returned, or
	// was abandoned); zero when it did not run.
	HandlerDuration time.Duration
	// LeaseLost: the lease was lost (Outcome is OutcomeLeaseLost).
	LeaseLost bool
	// Err is Result.Err: the handler's error, or the one that decided the
	// outcome.
	Err error
}

// EventsDropped returns how many events Config.Events had no room for
// (also counted in observe.EventsDropped); 0 for a nil Worker.
func (w *Worker) EventsDropped() int64 {
	if w == nil {
		return 0
	}
	return w.eventsDropped.Load()
}

// finish reports a delivery's final Result: to the tests' signal, and to
// Config.Events when the worker recorded an outcome. The send never
// blocks: an event that finds the channel full is dropped and counted.
func (w *Worker) finish(res Result) {
	w.testSignals.Processed.Signal(res)
	if w.cfg.Events == nil || !recorded(res) {
		return
	}
	select {
	case w.cfg.Events <- Event{AttemptID: res.AttemptID, TenantID: res.TenantID, Outcome: res.Outcome, ErrorCode: res.ErrorCode,
		HandlerDuration: res.HandlerDuration, LeaseLost: res.Outcome == OutcomeLeaseLost, Err: res.Err}:
	default:
		w.eventsDropped.Add(1)
		w.cfg.Metrics.Add(observe.EventsDropped, 1)
	}
}

// recorded reports whether res is an outcome the worker recorded: a
// completion, a lost lease, or a code written with a failure, a retry or
// a hand-back (settle clears the code of a write that failed; an
// exhausted attempt another worker failed first has none).
func recorded(res Result) bool {
	switch res.Outcome {
	case OutcomeCompleted, OutcomeLeaseLost:
		return true
	case OutcomeFailed, OutcomeRetried, OutcomeExhausted, OutcomeReleased, OutcomeAbandoned:
		return res.ErrorCode != ""
	}
	return false
}
