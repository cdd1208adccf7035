package repo

// Taking the lease for a delivery, the Go twin of db/queries/lease.sql and
// in its order: AcquireLease and FailExhausted (fenced by the delivery),
// with their inputs (Delivery) and result (Lease), and the read that
// explains a refused delivery (explainDelivery). What the lease holder
// does next (Heartbeat first) is worker.go's, as worker.sql's.

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
	// ExpiresAt is when the lease lapses unless a Heartbeat extends it, on
	// the database's clock.
	ExpiresAt time.Time
	// LocalDeadline is the same end on this process's clock: the instant
	// the statement that granted or last renewed the lease was sent, plus
	// its duration. The database read its clock later than that, so
	// LocalDeadline never comes after the true expiry, however far this
	// host's clock is from the database's. The Repo sets it (zero under a
	// test clock override, whose ExpiresAt is on no real clock).
	LocalDeadline time.Time
}

// StopBy is when the lease's holder must treat it as lapsed, on this
// process's clock: LocalDeadline, or ExpiresAt for a Lease built without
// one; the zero time (long past: stop now) for a nil Lease.
func (l *Lease) StopBy() time.Time {
	if l == nil {
		return time.Time{}
	}
	if l.LocalDeadline.IsZero() {
		return l.ExpiresAt
	}
	return l.LocalDeadline
}

// localDeadline is a lease's LocalDeadline for a statement sent at sent
// granting d: none under a clock override.
func (r *Repo) localDeadline(sent time.Time, d time.Duration) time.Time {
	if r.now() != nil {
		return time.Time{}
	}
	return sent.Add(d)
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
		v.optionalDuration("LeaseDuration", p.LeaseDuration)
	}
	if err := v.result(); err != nil {
		return nil, nil, err
	}
	d := p.LeaseDuration
	if d == 0 {
		d = LeaseDurationDefault
	}
	sent := time.Now()
	row, err := r.q.AcquireLease(ctx, db, &gen.AcquireLeaseParams{AsyncCommit: r.asyncProgress,
		WorkerID: p.WorkerID, Now: r.now(), LeaseDuration: d, AttemptID: p.AttemptID,
		QueueJobID: p.QueueJobID, ExternalJobID: p.ExternalJobID,
	})
	if err != nil {
		return nil, nil, r.explainDelivery(ctx, db, "acquire lease", &p.Delivery, err, false)
	}
	a := attemptFromRow(row)
	return a, &Lease{AttemptID: a.ID, WorkerID: *a.WorkerID, Token: *a.LeaseToken, ExpiresAt: *a.LeaseExpiresAt,
		LocalDeadline: r.localDeadline(sent, d)}, nil
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
