package repo

import (
	"context"
	"fmt"
	"time"

	"github.com/google/uuid"

	"github.com/knowledgefs/kfsdb/db/gen"
	"github.com/knowledgefs/kfsdb/kfstype"
)

// Complete ends a running attempt at smoke_eval_passed as succeeded, at
// checkpoint published; its outbox row is completed.
//
// Errors: *InputError, ErrNotFound, ErrLeaseLost, *TransitionError (not at
// smoke_eval_passed).
func (r *Repo) Complete(ctx context.Context, db DBTX, lease *Lease) (*kfstype.Attempt, error) {
	v := r.call(ctx, db)
	lease.validate(v)
	if err := v.result(); err != nil {
		return nil, err
	}
	row, err := r.q.Complete(ctx, db, &gen.CompleteParams{Now: r.now(), AttemptID: lease.AttemptID, LeaseToken: lease.Token, WorkerID: lease.WorkerID})
	if err == nil {
		return attemptFromRow(row), nil
	}
	a, err := r.explainLease(ctx, db, "complete", lease, err)
	if a == nil {
		return nil, err
	}
	if a.Checkpoint == kfstype.CheckpointSmokeEvalPassed {
		return nil, raced("complete", a)
	}
	return nil, &TransitionError{AttemptID: a.ID, Transition: "complete", From: a.RunState, To: kfstype.RunStateSucceeded, Checkpoint: a.Checkpoint,
		Reason: "checkpoint must be smoke_eval_passed, is " + string(a.Checkpoint), Attempt: a}
}

// CompleteThroughParams completes an attempt from any checkpoint.
type CompleteThroughParams struct {
	Lease *Lease
	// CandidatePublicationID and CandidateFingerprint bind the candidate
	// publication when none is bound yet; one must be bound or given, as
	// the walk passes projection_built.
	CandidatePublicationID *uuid.UUID
	CandidateFingerprint   *string
}

// CompleteThrough is AdvanceTo(smoke_eval_passed) then Complete in one
// statement: a running attempt at any checkpoint ends as succeeded at
// published, its outbox row completed. A handler with nothing to persist
// between checkpoints finishes with this one commit instead of one per
// remaining step plus Complete.
//
// Errors: *InputError, ErrNotFound, ErrLeaseLost, ErrCandidateRejected.
func (r *Repo) CompleteThrough(ctx context.Context, db DBTX, p *CompleteThroughParams) (*kfstype.Attempt, error) {
	v := r.call(ctx, db)
	if set(v, "CompleteThroughParams", p) {
		p.Lease.validate(v)
		validateCandidate(v, p.CandidatePublicationID, p.CandidateFingerprint)
	}
	if err := v.result(); err != nil {
		return nil, err
	}
	row, err := r.q.CompleteThrough(ctx, db, &gen.CompleteThroughParams{
		CandidatePublicationID: p.CandidatePublicationID, CandidateFingerprint: p.CandidateFingerprint,
		Now: r.now(), AttemptID: p.Lease.AttemptID, LeaseToken: p.Lease.Token, WorkerID: p.Lease.WorkerID,
	})
	if err == nil {
		return attemptFromRow(row), nil
	}
	a, err := r.explainLease(ctx, db, "complete", p.Lease, err)
	if a == nil {
		return nil, err
	}
	return nil, candidateRefusal("complete", a, kfstype.CheckpointPublished, p.CandidatePublicationID, p.CandidateFingerprint)
}

// FailParams ends a running attempt as failed.
type FailParams struct {
	Lease *Lease
	// ErrorCode is required, 1..64 characters.
	ErrorCode string
	// ErrorMessage is required; it is cut to 4,096 characters.
	ErrorMessage string
}

// Fail ends a running attempt as failed with an error code; its outbox row
// is dead. RetryFailed can reactivate it.
//
// Errors: *InputError, ErrNotFound, ErrLeaseLost.
func (r *Repo) Fail(ctx context.Context, db DBTX, p *FailParams) (*kfstype.Attempt, error) {
	v := r.call(ctx, db)
	if set(v, "FailParams", p) {
		p.Lease.validate(v)
		v.text("ErrorCode", p.ErrorCode, MaxErrorCodeLength)
		if p.ErrorMessage == "" {
			v.fail("ErrorMessage", "must not be empty")
		}
	}
	if err := v.result(); err != nil {
		return nil, err
	}
	row, err := r.q.Fail(ctx, db, &gen.FailParams{
		Now: r.now(), ErrorCode: p.ErrorCode, ErrorMessage: TruncateMessage(p.ErrorMessage),
		AttemptID: p.Lease.AttemptID, LeaseToken: p.Lease.Token, WorkerID: p.Lease.WorkerID,
	})
	if err != nil {
		a, err := r.explainLease(ctx, db, "fail", p.Lease, err)
		if a != nil {
			return nil, raced("fail", a)
		}
		return nil, err
	}
	return attemptFromRow(row), nil
}

// ScheduleRetryParams parks a running attempt for another execution.
type ScheduleRetryParams struct {
	Lease *Lease
	// RetryDelay (> 0) from the database's now is when the relay publishes
	// the attempt again.
	RetryDelay time.Duration
	// ErrorCode is required, 1..64 characters.
	ErrorCode string
	// ErrorMessage is required; it is cut to 4,096 characters.
	ErrorMessage string
}

// ScheduleRetry moves a running attempt with execution attempts left to
// retry_wait until now+RetryDelay; lease and job ids are cleared and the
// outbox row is pending again at retry_at with a fresh dispatch budget.
//
// Errors: *InputError, ErrNotFound, ErrLeaseLost, ErrAttemptsExhausted
// (call Fail instead).
func (r *Repo) ScheduleRetry(ctx context.Context, db DBTX, p *ScheduleRetryParams) (*kfstype.Attempt, error) {
	v := r.call(ctx, db)
	if set(v, "ScheduleRetryParams", p) {
		p.Lease.validate(v)
		v.duration("RetryDelay", p.RetryDelay)
		v.text("ErrorCode", p.ErrorCode, MaxErrorCodeLength)
		if p.ErrorMessage == "" {
			v.fail("ErrorMessage", "must not be empty")
		}
	}
	if err := v.result(); err != nil {
		return nil, err
	}
	row, err := r.q.ScheduleRetry(ctx, db, &gen.ScheduleRetryParams{
		Now: r.now(), RetryDelay: p.RetryDelay, ErrorCode: p.ErrorCode, ErrorMessage: TruncateMessage(p.ErrorMessage),
		AttemptID: p.Lease.AttemptID, LeaseToken: p.Lease.Token, WorkerID: p.Lease.WorkerID,
	})
	if err == nil {
		return attemptFromRow(row), nil
	}
	a, err := r.explainLease(ctx, db, "schedule retry", p.Lease, err)
	if a == nil {
		return nil, err
	}
	if a.ExecutionAttempts < a.MaxExecutionAttempts {
		return nil, raced("schedule retry", a)
	}
	return nil, fmt.Errorf("schedule retry of attempt %s: %w (%d of %d used)", a.ID, ErrAttemptsExhausted, a.ExecutionAttempts, a.MaxExecutionAttempts)
}
