package repo

// The worker's transitions, the Go twin of db/queries/worker.sql and in
// its order: AcquireLease and FailExhausted (fenced by the delivery),
// then the lease-fenced Heartbeat, Advance (and AdvanceTo), Complete,
// CompleteThrough, Fail, ScheduleRetry and CompleteMany.

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

// LeaseDurationDefault is AcquireLeaseParams' and HeartbeatParams'
// LeaseDuration when zero, and worker.Config.LeaseDuration's default (the
// worker heartbeats every third of it).
const LeaseDurationDefault = 60 * time.Second

// Lease is a worker's hold on a running attempt, returned by AcquireLease.
// Every later worker call presents it; once it expired or another
// AcquireLease took the attempt over, those calls return ErrLeaseLost and
// change nothing.
type Lease struct {
	// AttemptID is the leased attempt.
	AttemptID uuid.UUID
	// WorkerID is the worker holding the lease (the attempt's worker_id).
	WorkerID string
	// Token is the lease's random token (the attempt's lease_token); a
	// new AcquireLease of the attempt draws another.
	Token uuid.UUID
	// ExpiresAt is when the lease lapses unless a Heartbeat extends it.
	ExpiresAt time.Time
}

func (l *Lease) validate(v *validator) {
	if l == nil {
		v.fail("Lease", "must be set")
		return
	}
	v.uuid("Lease.AttemptID", l.AttemptID)
	v.text("Lease.WorkerID", l.WorkerID, MaxWorkerIDLength)
	v.uuid("Lease.Token", l.Token)
}

// Delivery is a queue message naming an attempt: the ids the relay's
// Publisher returned when it published the attempt's outbox row.
type Delivery struct {
	// AttemptID is the attempt the message names (its payload).
	AttemptID uuid.UUID
	// QueueJobID is the queue's id of the message, 1..255 characters: it
	// must be the attempt's current one.
	QueueJobID string
	// ExternalJobID, when set, must match too. Defaults to nil: not checked.
	ExternalJobID *string
}

func (d *Delivery) validate(v *validator) {
	if !set(v, "Delivery", d) {
		return
	}
	v.uuid("AttemptID", d.AttemptID)
	v.text("QueueJobID", d.QueueJobID, MaxJobIDLength)
	v.optionalText("ExternalJobID", d.ExternalJobID, MaxJobIDLength)
}

// AcquireLeaseParams is a delivery a worker wants to run.
type AcquireLeaseParams struct {
	// Delivery is the queue message: the attempt and its job ids.
	Delivery
	// WorkerID names the worker taking the lease, 1..255 characters.
	WorkerID string
	// LeaseDuration must be > 0. Defaults to LeaseDurationDefault.
	LeaseDuration time.Duration
}

// AcquireLease takes the lease for a delivered attempt: running, one more
// execution attempt, a fresh random lease token. Claimable are queued
// attempts and running ones whose lease expired (a lost worker). A
// retry_wait attempt has no job id to match (ScheduleRetry cleared it; the
// relay's MarkDispatched records the next one and makes it queued), so its
// deliveries are stale. The outbox row becomes leased and due again at the
// lease expiry, so the relay redelivers if the worker is lost.
//
// Errors: *InputError, ErrNotFound, ErrDeliveryMismatch (stale or forged
// delivery: acknowledge it), ErrDeliveryPending (the publication is not
// recorded yet, or its record committed while the lease was being taken:
// deliver again shortly), ErrAttemptsExhausted (call FailExhausted),
// *TransitionError (terminal, or leased by another worker: its Attempt
// says until when).
func (r *Repo) AcquireLease(ctx context.Context, db DBTX, p *AcquireLeaseParams) (*kfstype.Attempt, *Lease, error) {
	v := r.call(ctx, db)
	if set(v, "AcquireLeaseParams", p) {
		p.Delivery.validate(v)
		v.text("WorkerID", p.WorkerID, MaxWorkerIDLength)
		if p.LeaseDuration != 0 {
			v.duration("LeaseDuration", p.LeaseDuration)
		}
	}
	if err := v.result(); err != nil {
		return nil, nil, err
	}
	d := p.LeaseDuration
	if d == 0 {
		d = LeaseDurationDefault
	}
	row, err := r.q.AcquireLease(ctx, db, &gen.AcquireLeaseParams{AsyncCommit: r.asyncProgress,
		WorkerID: p.WorkerID, Now: r.now(), LeaseDuration: d, AttemptID: p.AttemptID,
		QueueJobID: p.QueueJobID, ExternalJobID: p.ExternalJobID,
	})
	if err != nil {
		return nil, nil, r.explainDelivery(ctx, db, "acquire lease", &p.Delivery, err, false)
	}
	a := attemptFromRow(row)
	return a, &Lease{AttemptID: a.ID, WorkerID: *a.WorkerID, Token: *a.LeaseToken, ExpiresAt: *a.LeaseExpiresAt}, nil
}

// FailExhaustedParams is the delivery of an attempt with no execution
// attempts left.
type FailExhaustedParams struct {
	// Delivery is the queue message: the attempt and its job ids.
	Delivery
}

// FailExhausted fails a delivered attempt that has no execution attempts
// left (EXECUTION_ATTEMPTS_EXHAUSTED); the worker calls it when
// AcquireLease returned ErrAttemptsExhausted.
//
// Errors: *InputError, ErrNotFound, ErrDeliveryMismatch, *TransitionError
// (attempts left, terminal, or still leased).
func (r *Repo) FailExhausted(ctx context.Context, db DBTX, p *FailExhaustedParams) (*kfstype.Attempt, error) {
	v := r.call(ctx, db)
	if set(v, "FailExhaustedParams", p) {
		p.Delivery.validate(v)
	}
	if err := v.result(); err != nil {
		return nil, err
	}
	d := &p.Delivery
	row, err := r.q.FailExhausted(ctx, db, &gen.FailExhaustedParams{
		Now: r.now(), AttemptID: d.AttemptID, QueueJobID: d.QueueJobID, ExternalJobID: d.ExternalJobID,
	})
	if err != nil {
		return nil, r.explainDelivery(ctx, db, "fail exhausted", d, err, true)
	}
	return attemptFromRow(row), nil
}

// explainDelivery says why AcquireLease or FailExhausted matched no row.
func (r *Repo) explainDelivery(ctx context.Context, db DBTX, verb string, d *Delivery, err error, exhausting bool) error {
	if !errors.Is(err, pgx.ErrNoRows) {
		return fmt.Errorf("%s for attempt %s: %w", verb, d.AttemptID, mapError(err))
	}
	a, o, now, rerr := r.getAttemptWithOutbox(ctx, db, d.AttemptID, nil)
	if rerr != nil {
		return fmt.Errorf("%s for attempt %s: %w", verb, d.AttemptID, rerr)
	}
	if !sameID(a.QueueJobID, &d.QueueJobID) || !sameID(o.QueueJobID, &d.QueueJobID) ||
		(d.ExternalJobID != nil && (!sameID(a.ExternalJobID, d.ExternalJobID) || !sameID(o.ExternalJobID, d.ExternalJobID))) {
		if o.Status == kfstype.OutboxStatusDispatching {
			// Queues can deliver before the relay's MarkDispatched commits.
			return fmt.Errorf("%s for attempt %s: %w: delivered job %q, outbox row claimed until %s", verb, d.AttemptID, ErrDeliveryPending, d.QueueJobID, o.LockedUntil.Format(time.RFC3339Nano))
		}
		return fmt.Errorf("%s for attempt %s: %w: delivered job %q, attempt's is %s", verb, d.AttemptID, ErrDeliveryMismatch, d.QueueJobID, quoteOrNull(a.QueueJobID))
	}
	te := &TransitionError{AttemptID: a.ID, Transition: verb, From: a.RunState, To: kfstype.RunStateRunning, Checkpoint: a.Checkpoint, Attempt: a}
	if exhausting {
		te.To = kfstype.RunStateFailed
	}
	switch {
	case a.RunState.Terminal():
		te.Reason = "the attempt is terminal"
	case a.RunState == kfstype.RunStateRunning && a.LeaseExpiresAt.After(now):
		te.Reason = "leased by worker " + *a.WorkerID + " until " + a.LeaseExpiresAt.Format(time.RFC3339Nano)
	case !exhausting && a.ExecutionAttempts >= a.MaxExecutionAttempts:
		return fmt.Errorf("%s for attempt %s: %w (%d of %d)", verb, d.AttemptID, ErrAttemptsExhausted, a.ExecutionAttempts, a.MaxExecutionAttempts)
	case exhausting && a.ExecutionAttempts < a.MaxExecutionAttempts:
		te.Reason = fmt.Sprintf("execution attempts left (%d of %d used)", a.ExecutionAttempts, a.MaxExecutionAttempts)
	case !exhausting && (a.RunState == kfstype.RunStateQueued || a.RunState == kfstype.RunStateRunning):
		// The ids match and the attempt is claimable now (queued, or
		// running with an expired lease): the statement's snapshot predates
		// the relay's MarkDispatched, which committed before this read.
		return fmt.Errorf("%s for attempt %s: %w: the relay recorded job %q while it was being delivered", verb, d.AttemptID, ErrDeliveryPending, d.QueueJobID)
	default:
		te.Reason = "the attempt is not waiting for a worker"
	}
	return te
}

func sameID(have, want *string) bool { return have != nil && want != nil && *have == *want }

func quoteOrNull(s *string) string {
	if s == nil {
		return "NULL"
	}
	return fmt.Sprintf("%q", *s)
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
		p.Lease.validate(v)
		if p.LeaseDuration != 0 {
			v.duration("LeaseDuration", p.LeaseDuration)
		}
	}
	if err := v.result(); err != nil {
		return nil, err
	}
	d := p.LeaseDuration
	if d == 0 {
		d = LeaseDurationDefault
	}
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
	return &renewed, nil
}

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
	p.Lease.validate(v)
	switch {
	case p.Checkpoint == kfstype.CheckpointPublished:
		v.fail("Checkpoint", "published is reached through Complete")
	case p.Checkpoint.Rank() < 0:
		v.fail("Checkpoint", fmt.Sprintf("unknown checkpoint %q", p.Checkpoint))
	}
	validateCandidate(v, p.CandidatePublicationID, p.CandidateFingerprint)
}

func validateCandidate(v *validator, id *uuid.UUID, fingerprint *string) {
	if (id == nil) != (fingerprint == nil) {
		v.fail("CandidatePublicationID", "and CandidateFingerprint go together")
	}
	if id != nil {
		v.uuid("CandidatePublicationID", *id)
	}
	if fingerprint != nil {
		v.fingerprint("CandidateFingerprint", *fingerprint)
	}
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
		p.Lease.validate(v)
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
			e.Lease.validate(v)
			validateCandidate(v, e.CandidatePublicationID, e.CandidateFingerprint)
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
