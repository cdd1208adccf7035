package repo

// The lease holder's transitions, the Go twin of db/queries/worker.sql and
// in its order: Heartbeat, Advance (and AdvanceTo), Complete,
// CompleteThrough, Fail, ScheduleRetry and CompleteMany, each fenced by the
// lease, with the read that explains a refused lease (explainLease).
// Taking the lease is lease.go's (lease.sql's).

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/knowledgefs/kfsdb/db/gen"
	"github.com/knowledgefs/kfsdb/kfstype"
)

// explainLease says why a lease-fenced statement matched no row. It
// returns (nil, err) when the lease itself is the reason (or the error is
// not "no row"): the attempt is not running, another token or worker holds
// it, it expired, or its outbox row is no longer leased (the relay
// reclaimed it); and (attempt, nil) when the lease is valid, so the caller
// names the transition-specific reason.
func (r *Repo) explainLease(ctx context.Context, db DBTX, verb string, l *Lease, err error) (*kfstype.Attempt, error) {
	if !errors.Is(err, pgx.ErrNoRows) {
		return nil, fmt.Errorf("%s attempt %s: %w", verb, l.AttemptID, mapError(err))
	}
	a, o, now, rerr := r.getAttemptWithOutbox(ctx, db, l.AttemptID, nil)
	if rerr != nil {
		return nil, fmt.Errorf("%s attempt %s: %w", verb, l.AttemptID, rerr)
	}
	switch {
	case a.RunState != kfstype.RunStateRunning:
		return nil, fmt.Errorf("%s attempt %s: %w: attempt is %s", verb, l.AttemptID, ErrLeaseLost, a.RunState)
	case *a.LeaseToken != l.Token || *a.WorkerID != l.WorkerID:
		return nil, fmt.Errorf("%s attempt %s: %w: lease taken over by worker %s", verb, l.AttemptID, ErrLeaseLost, *a.WorkerID)
	case !a.LeaseExpiresAt.After(now):
		return nil, fmt.Errorf("%s attempt %s: %w: lease expired at %s", verb, l.AttemptID, ErrLeaseLost, a.LeaseExpiresAt.Format(time.RFC3339Nano))
	case o.Status != kfstype.OutboxStatusLeased:
		// The relay reclaimed the row at the lease's expiry by its clock
		// (ClaimOutbox), and may be redelivering the attempt.
		return nil, fmt.Errorf("%s attempt %s: %w: outbox row reclaimed by the relay (%s), lease expiring at %s", verb, l.AttemptID, ErrLeaseLost, o.Status, a.LeaseExpiresAt.Format(time.RFC3339Nano))
	}
	return a, nil
}

// raced is the refusal of a transition whose guard failed although the row,
// read right after, passes it: the row changed in between. Retrying is safe.
func raced(verb string, a *kfstype.Attempt) error {
	return &TransitionError{AttemptID: a.ID, Transition: verb, From: a.RunState, To: a.RunState, Checkpoint: a.Checkpoint,
		Reason: "the row changed concurrently; retry", Attempt: a}
}

// HeartbeatParams extends a lease.
type HeartbeatParams struct {
	// Lease is the lease to extend.
	Lease *Lease
	// LeaseDuration is the new lease from now. Defaults to
	// LeaseDurationDefault.
	LeaseDuration time.Duration
}

// Heartbeat extends a live lease (and the outbox row's redelivery time with
// it). It returns the renewed lease; the caller keeps using it.
//
// Errors: *InputError, ErrNotFound, ErrLeaseLost (stop the handler).
func (r *Repo) Heartbeat(ctx context.Context, db DBTX, p *HeartbeatParams) (*Lease, error) {
	v := r.call(ctx, db)
	if set(v, "HeartbeatParams", p) {
		v.lease(p.Lease)
		v.optionalDuration("LeaseDuration", p.LeaseDuration)
	}
	if err := v.result(); err != nil {
		return nil, err
	}
	d := p.LeaseDuration
	if d == 0 {
		d = LeaseDurationDefault
	}
	sent := time.Now()
	row, err := r.q.Heartbeat(ctx, db, &gen.HeartbeatParams{AsyncCommit: r.asyncProgress,
		Now: r.now(), LeaseDuration: d, AttemptID: p.Lease.AttemptID, LeaseToken: p.Lease.Token, WorkerID: p.Lease.WorkerID,
	})
	if err != nil {
		a, err := r.explainLease(ctx, db, "heartbeat", p.Lease, err)
		if a != nil {
			return nil, raced("heartbeat", a)
		}
		return nil, err
	}
	renewed := *p.Lease
	renewed.ExpiresAt = row.LeaseExpiresAt.UTC()
	renewed.LocalDeadline = r.localDeadline(sent, d)
	return &renewed, nil
}

// AdvanceParams moves a running attempt's checkpoint.
type AdvanceParams struct {
	// Lease is the caller's lease on the attempt.
	Lease *Lease
	// Checkpoint is the current checkpoint or the next one; published is
	// reached only through Complete.
	Checkpoint kfstype.Checkpoint
	// CandidatePublicationID and CandidateFingerprint bind the candidate
	// publication (both or neither; bound once). Required by the time the
	// attempt reaches projection_built. Defaults to nil: nothing bound.
	CandidatePublicationID *uuid.UUID
	// CandidateFingerprint is the candidate's fingerprint
	// (projection-set-sha256: and 64 lowercase hex digits), with
	// CandidatePublicationID. Defaults to nil.
	CandidateFingerprint *string
}

// Advance keeps the checkpoint or moves it one step, binding the candidate
// publication when given.
//
// Errors: *InputError, ErrNotFound, ErrLeaseLost, *TransitionError (a
// checkpoint that skips or goes back), ErrCandidateRejected.
func (r *Repo) Advance(ctx context.Context, db DBTX, p *AdvanceParams) (*kfstype.Attempt, error) {
	return r.advance(ctx, db, "AdvanceParams", p, 1)
}

// AdvanceToParams moves a running attempt's checkpoint forward any number
// of steps; its fields are AdvanceParams'.
type AdvanceToParams AdvanceParams

// AdvanceTo moves the checkpoint forward any number of steps (or keeps it)
// in one statement, binding the candidate publication when given. It is
// the same as the one-step Advance calls it replaces, run in one
// transaction: for a handler that has nothing to persist between
// checkpoints, it saves a commit per step skipped.
//
// Errors: as Advance; *TransitionError when the checkpoint would go back.
func (r *Repo) AdvanceTo(ctx context.Context, db DBTX, p *AdvanceToParams) (*kfstype.Attempt, error) {
	return r.advance(ctx, db, "AdvanceToParams", (*AdvanceParams)(p), kfstype.CheckpointSmokeEvalPassed.Rank())
}

// advance is Advance and AdvanceTo: the checkpoint stays or moves forward
// at most maxSteps steps. params names p's type in a refusal.
func (r *Repo) advance(ctx context.Context, db DBTX, params string, p *AdvanceParams, maxSteps int) (*kfstype.Attempt, error) {
	v := r.call(ctx, db)
	p.validate(v, params)
	if err := v.result(); err != nil {
		return nil, err
	}
	row, err := r.q.Advance(ctx, db, &gen.AdvanceParams{AsyncCommit: r.asyncProgress,
		Checkpoint: string(p.Checkpoint), MaxSteps: int32(maxSteps), CandidatePublicationID: p.CandidatePublicationID,
		CandidateFingerprint: p.CandidateFingerprint, Now: r.now(), AttemptID: p.Lease.AttemptID,
		LeaseToken: p.Lease.Token, WorkerID: p.Lease.WorkerID,
	})
	if err == nil {
		return attemptFromRow(row), nil
	}
	a, err := r.explainLease(ctx, db, "advance", p.Lease, err)
	if a == nil {
		return nil, err
	}
	switch cur, want := a.Checkpoint.Rank(), p.Checkpoint.Rank(); {
	case want < cur:
		return nil, checkpointRefusal("advance", a, p.Checkpoint, "goes back")
	case want > cur+maxSteps:
		return nil, checkpointRefusal("advance", a, p.Checkpoint, "skips a checkpoint")
	}
	return nil, candidateRefusal("advance", a, p.Checkpoint, p.CandidatePublicationID, p.CandidateFingerprint)
}

func (p *AdvanceParams) validate(v *validator, params string) {
	if !set(v, params, p) {
		return
	}
	v.lease(p.Lease)
	switch {
	case p.Checkpoint == kfstype.CheckpointPublished:
		v.fail("Checkpoint", "published is reached through Complete")
	case p.Checkpoint.Rank() < 0:
		v.fail("Checkpoint", fmt.Sprintf("unknown checkpoint %q", p.Checkpoint))
	}
	v.candidate(p.CandidatePublicationID, p.CandidateFingerprint)
}

func checkpointRefusal(verb string, a *kfstype.Attempt, to kfstype.Checkpoint, why string) error {
	return &TransitionError{AttemptID: a.ID, Transition: verb, From: a.RunState, To: a.RunState, Checkpoint: a.Checkpoint,
		Reason: fmt.Sprintf("checkpoint %s -> %s %s", a.Checkpoint, to, why), Attempt: a}
}

// candidateRefusal says why a write whose lease and checkpoint rules hold
// was refused: the candidate publication. a is the row read after the
// refusal; to is the checkpoint the write would have reached.
func candidateRefusal(verb string, a *kfstype.Attempt, to kfstype.Checkpoint, id *uuid.UUID, fingerprint *string) error {
	switch {
	case id == nil && a.CandidatePublicationID == nil && to.NeedsCandidate():
		return fmt.Errorf("%s attempt %s to %s: %w: no candidate publication bound", verb, a.ID, to, ErrCandidateRejected)
	case id == nil:
		return raced(verb, a)
	case a.CandidatePublicationID != nil && (*a.CandidatePublicationID != *id || *a.CandidateFingerprint != *fingerprint):
		return fmt.Errorf("%s attempt %s: %w: candidate %s already bound, not %s", verb, a.ID, ErrCandidateRejected, *a.CandidatePublicationID, *id)
	case a.CandidatePublicationID != nil:
		return raced(verb, a)
	default:
		return fmt.Errorf("%s attempt %s: %w: %s is not a candidate publication with that fingerprint in the attempt's tenant and space", verb, a.ID, ErrCandidateRejected, *id)
	}
}

// CompleteParams ends a running attempt as succeeded.
type CompleteParams struct {
	// Lease is the caller's lease on the attempt.
	Lease *Lease
}

// Complete ends a running attempt at smoke_eval_passed as succeeded, at
// checkpoint published; its outbox row is completed.
//
// Errors: *InputError, ErrNotFound, ErrLeaseLost, *TransitionError (not at
// smoke_eval_passed).
func (r *Repo) Complete(ctx context.Context, db DBTX, p *CompleteParams) (*kfstype.Attempt, error) {
	v := r.call(ctx, db)
	if set(v, "CompleteParams", p) {
		v.lease(p.Lease)
	}
	if err := v.result(); err != nil {
		return nil, err
	}
	lease := p.Lease
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
	// Lease is the caller's lease on the attempt.
	Lease *Lease
	// CandidatePublicationID and CandidateFingerprint bind the candidate
	// publication when none is bound yet; one must be bound or given, as
	// the walk passes projection_built.
	CandidatePublicationID *uuid.UUID
	// CandidateFingerprint goes with CandidatePublicationID.
	CandidateFingerprint *string
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
		v.lease(p.Lease)
		v.candidate(p.CandidatePublicationID, p.CandidateFingerprint)
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
	// Lease is the caller's lease on the attempt.
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
		v.lease(p.Lease)
		v.errorReport(p.ErrorCode, p.ErrorMessage)
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
	// Lease is the caller's lease on the attempt.
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
		v.lease(p.Lease)
		v.duration("RetryDelay", p.RetryDelay)
		v.errorReport(p.ErrorCode, p.ErrorMessage)
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

// CompleteManyEntry is one lease to complete in CompleteMany.
type CompleteManyEntry struct {
	// Lease is the caller's lease on the attempt.
	Lease *Lease
	// Through completes from any checkpoint (CompleteThrough); otherwise
	// the attempt must be at smoke_eval_passed (Complete).
	Through bool
	// CandidatePublicationID and CandidateFingerprint are
	// CompleteThroughParams'; only with Through.
	CandidatePublicationID *uuid.UUID
	// CandidateFingerprint goes with CandidatePublicationID.
	CandidateFingerprint *string
}

// CompleteManyParams is a batch of leases to complete.
type CompleteManyParams struct {
	// Entries are 1..MaxBatchSize leases, each attempt named once.
	Entries []CompleteManyEntry
}

// CompleteManyResult is one entry's outcome, in input order.
type CompleteManyResult struct {
	// Attempt is the completed attempt; nil with Err.
	Attempt *kfstype.Attempt
	// Err is what Complete or CompleteThrough would have returned for this
	// entry; the other entries are unaffected.
	Err error
}

// CompleteMany is Complete and CompleteThrough for a batch of leases in
// one statement: the worker's completer records what its slots finished
// meanwhile with one commit. Each entry keeps its transition's
// guard; one that fails it is retried alone (a second statement), whose
// typed error lands in its result's Err.
//
// Errors: *InputError for the batch (it names the entry); a database error
// fails the whole batch.
func (r *Repo) CompleteMany(ctx context.Context, db DBTX, p *CompleteManyParams) ([]CompleteManyResult, error) {
	if v := r.call(ctx, db); !set(v, "CompleteManyParams", p) || v.err != nil {
		return nil, v.result()
	}
	entries := p.Entries
	n := len(entries)
	if n == 0 || n > MaxBatchSize {
		return nil, &InputError{Field: "Entries", Reason: fmt.Sprintf("must hold 1..%d entries", MaxBatchSize)}
	}
	arg := &gen.CompleteManyParams{
		Now: r.now(), AttemptIds: make([]uuid.UUID, n), LeaseTokens: make([]uuid.UUID, n), WorkerIds: make([]string, n),
		Through: make([]bool, n), CandidatePublicationIds: make([]uuid.UUID, n), CandidateFingerprints: make([]string, n),
	}
	index := make(map[uuid.UUID]int, n)
	for i := range entries {
		e := &entries[i]
		err := entryError("Entries", i, func(v *validator) {
			v.lease(e.Lease)
			v.candidate(e.CandidatePublicationID, e.CandidateFingerprint)
			if !e.Through && e.CandidatePublicationID != nil {
				v.fail("CandidatePublicationID", "is only for Through")
			}
		})
		if err != nil {
			return nil, err
		}
		if _, dup := index[e.Lease.AttemptID]; dup {
			return nil, &InputError{Field: fmt.Sprintf("Entries[%d]", i), Reason: "names an attempt twice in the batch"}
		}
		index[e.Lease.AttemptID] = i
		arg.AttemptIds[i], arg.LeaseTokens[i], arg.WorkerIds[i], arg.Through[i] = e.Lease.AttemptID, e.Lease.Token, e.Lease.WorkerID, e.Through
		if e.CandidatePublicationID != nil {
			arg.CandidatePublicationIds[i], arg.CandidateFingerprints[i] = *e.CandidatePublicationID, *e.CandidateFingerprint
		}
	}
	rows, err := r.q.CompleteMany(ctx, db, arg)
	if err != nil {
		return nil, fmt.Errorf("complete %d attempts: %w", n, mapError(err))
	}
	out := make([]CompleteManyResult, n)
	for _, row := range rows {
		a := attemptFromRow(row)
		out[index[a.ID]] = CompleteManyResult{Attempt: a}
	}
	for i := range entries {
		if out[i].Attempt != nil {
			continue // completed by the statement
		}
		e := &entries[i]
		var a *kfstype.Attempt
		if e.Through {
			a, err = r.CompleteThrough(ctx, db, &CompleteThroughParams{
				Lease: e.Lease, CandidatePublicationID: e.CandidatePublicationID, CandidateFingerprint: e.CandidateFingerprint,
			})
		} else {
			a, err = r.Complete(ctx, db, &CompleteParams{Lease: e.Lease})
		}
		out[i] = CompleteManyResult{Attempt: a, Err: err}
	}
	return out, nil
}
