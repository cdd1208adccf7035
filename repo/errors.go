package repo

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/knowledgefs/kfsdb/kfstype"
)

// Sentinel errors. Every error a transition returns matches exactly one of
// them with errors.Is, or is a context or connection error from pgx, which
// matches none of them ([IsRetryable] tells the transient ones).
var (
	// ErrNotFound: the row does not exist or belongs to another tenant or
	// space. Every control-plane function returns it for another tenant's ids;
	// Start returns it for a missing space or asset version.
	ErrNotFound = errors.New("kfsdb: not found")

	// ErrStaleRowVersion: an ExpectedRowVersion was given and the row has
	// moved on (Cancel, Supersede, RetryFailed, ReleaseDeferred).
	ErrStaleRowVersion = errors.New("kfsdb: stale row version")

	// ErrLeaseLost: the lease named by a worker call expired, was taken over
	// by another AcquireLease, belongs to another worker, or its outbox row
	// was reclaimed by the relay at the lease's expiry (Heartbeat, Advance,
	// AdvanceTo, Complete, CompleteThrough, CompleteMany, Fail,
	// ScheduleRetry). The worker must stop at once.
	ErrLeaseLost = errors.New("kfsdb: lease lost")

	// ErrDeliveryMismatch: a delivery's queue (or external) job id is not
	// the attempt's current one: a stale or forged delivery (AcquireLease,
	// FailExhausted). Acknowledge it without running anything.
	ErrDeliveryMismatch = errors.New("kfsdb: delivery does not match the attempt's queue job")

	// ErrDeliveryPending: a delivery's job id is not the attempt's yet, but
	// its outbox row is being published right now (a relay published it and
	// has not recorded the job id yet, or recorded it while AcquireLease
	// ran). Deliver it again shortly (AcquireLease, FailExhausted).
	ErrDeliveryPending = errors.New("kfsdb: delivery not recorded yet (publication in flight)")

	// ErrInvalidTransition: the row is in a state the transition does not
	// start from, e.g. Complete before smoke_eval_passed or Cancel of a
	// terminal attempt. Returned as a *TransitionError.
	ErrInvalidTransition = errors.New("kfsdb: invalid transition")

	// ErrHeadConflict: Start's base head revision is not the space's
	// publication head. Returned as a *HeadConflictError.
	ErrHeadConflict = errors.New("kfsdb: publication head conflict")

	// ErrLiveAttemptExists: RetryFailed found another live attempt for the
	// document version (or lost the race for its active slot: then the
	// unique violation's *pgconn.PgError is wrapped too).
	ErrLiveAttemptExists = errors.New("kfsdb: a live attempt exists for the document version")

	// ErrAttemptsExhausted: AcquireLease or ScheduleRetry found no
	// execution attempts left; the worker calls FailExhausted or Fail.
	ErrAttemptsExhausted = errors.New("kfsdb: execution attempts exhausted")

	// ErrCandidateRejected: Advance was given a candidate publication that is
	// not a 'candidate' publication of the attempt's tenant and space, or the
	// attempt already has another one bound, or a checkpoint at or past
	// projection_built was requested with no candidate bound.
	ErrCandidateRejected = errors.New("kfsdb: candidate publication rejected")

	// ErrInvalidInput: a parameter failed validation before any round trip.
	// Returned as an *InputError naming the field.
	ErrInvalidInput = errors.New("kfsdb: invalid input")

	// ErrRetryTransaction: PostgreSQL aborted the statement with a
	// serialization failure or deadlock (SQLSTATE class 40), for example
	// Start inside a REPEATABLE READ transaction racing another Start. The
	// caller's transaction is aborted: run it again. The *pgconn.PgError is
	// wrapped too.
	ErrRetryTransaction = errors.New("kfsdb: transaction conflict; retry the transaction")

	// ErrConstraint: a constraint violation reached the database anyway
	// (for example a row deleted concurrently). Returned as a
	// *ConstraintError naming the constraint.
	ErrConstraint = errors.New("kfsdb: constraint violation")
)

// InputError reports which input field is invalid and why.
type InputError struct {
	// Field names the invalid input: a params field ("TenantID"), an
	// entry of a batch ("Entries[2].Lease.Token"), or the params, ctx or
	// db themselves when nil.
	Field string
	// Reason is the rule the value breaks ("must not be empty").
	Reason string
}

func (e *InputError) Error() string {
	if e == nil {
		return ErrInvalidInput.Error()
	}
	return fmt.Sprintf("kfsdb: invalid input: %s %s", e.Field, e.Reason)
}

// Is makes errors.Is(err, ErrInvalidInput) true.
func (e *InputError) Is(target error) bool { return target == ErrInvalidInput }

// TransitionError reports a transition refused because of the attempt's
// state. From is the attempt's run state (and checkpoint) when it was
// refused, To the state the transition leads to.
type TransitionError struct {
	// AttemptID is the attempt the transition was refused for.
	AttemptID uuid.UUID
	// Transition names the refused transition in words ("complete",
	// "retry failed").
	Transition string
	// From is the attempt's run state when it was refused.
	From kfstype.RunState
	// To is the run state the transition leads to.
	To kfstype.RunState
	// Checkpoint is the attempt's checkpoint when it was refused.
	Checkpoint kfstype.Checkpoint
	// Reason says why, for a person ("checkpoint must be
	// smoke_eval_passed, is parsed").
	Reason string
	// Attempt is the row as read after the refusal, for callers that need
	// its times (a worker schedules a redelivery from RetryAt or
	// LeaseExpiresAt).
	Attempt *kfstype.Attempt
}

func (e *TransitionError) Error() string {
	if e == nil {
		return ErrInvalidTransition.Error()
	}
	msg := fmt.Sprintf("kfsdb: %s attempt %s: invalid transition %s -> %s", e.Transition, e.AttemptID, e.From, e.To)
	if e.Reason != "" {
		msg += ": " + e.Reason
	}
	return msg
}

// Is makes errors.Is(err, ErrInvalidTransition) true.
func (e *TransitionError) Is(target error) bool { return target == ErrInvalidTransition }

// HeadConflictError reports Start's expected base head revision and the
// space's actual one.
type HeadConflictError struct {
	// Expected is the StartParams.BaseHeadRevision given.
	Expected int32
	// Actual is the space's publication head revision (0 when none).
	Actual int32
}

func (e *HeadConflictError) Error() string {
	if e == nil {
		return ErrHeadConflict.Error()
	}
	return fmt.Sprintf("kfsdb: publication head conflict: expected base head revision %d, head is at %d", e.Expected, e.Actual)
}

// Is makes errors.Is(err, ErrHeadConflict) true.
func (e *HeadConflictError) Is(target error) bool { return target == ErrHeadConflict }

// ConstraintError is a constraint violation reported by PostgreSQL.
type ConstraintError struct {
	// Constraint is the violated constraint's (or index's) name.
	Constraint string
	// Table is the table it belongs to.
	Table string
	// Code is the SQLSTATE (class 23).
	Code string
	// Err is the driver's error, for its detail.
	Err *pgconn.PgError
}

func (e *ConstraintError) Error() string {
	switch {
	case e == nil:
		return ErrConstraint.Error()
	case e.Err == nil:
		return fmt.Sprintf("kfsdb: constraint %s on %s violated (SQLSTATE %s)", e.Constraint, e.Table, e.Code)
	}
	return fmt.Sprintf("kfsdb: constraint %s on %s violated (SQLSTATE %s): %s", e.Constraint, e.Table, e.Code, e.Err.Message)
}

// Is makes errors.Is(err, ErrConstraint) true.
func (e *ConstraintError) Is(target error) bool { return target == ErrConstraint }

// Unwrap returns the driver error.
func (e *ConstraintError) Unwrap() error {
	if e == nil || e.Err == nil {
		return nil // not a typed nil *pgconn.PgError
	}
	return e.Err
}

// activeSlotIndex is the unique index that allows one live attempt per
// document version.
const activeSlotIndex = "document_compilation_attempts_scope_version_active_uq"

// mapError turns driver errors into the module's: pgx.ErrNoRows into
// ErrNotFound, integrity violations (class 23) into *ConstraintError (the
// active-slot index into ErrLiveAttemptExists), serialization failures and
// deadlocks (class 40) into ErrRetryTransaction; each of those still wraps
// the *pgconn.PgError. Anything else, such as context and connection
// errors, passes through unchanged.
func mapError(err error) error {
	if err == nil {
		return nil
	}
	if errors.Is(err, pgx.ErrNoRows) {
		return ErrNotFound
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && len(pgErr.Code) == 5 && pgErr.Code[:2] == "40" {
		return fmt.Errorf("%w: %w", ErrRetryTransaction, err)
	}
	if errors.As(err, &pgErr) && len(pgErr.Code) == 5 && pgErr.Code[:2] == "23" {
		if pgErr.Code == "23505" && pgErr.ConstraintName == activeSlotIndex {
			// Both wrapped: errors.Is finds the sentinel, errors.As the
			// driver error (SQLSTATE, detail).
			return fmt.Errorf("%w (%s): %w", ErrLiveAttemptExists, pgErr.ConstraintName, err)
		}
		return &ConstraintError{Constraint: pgErr.ConstraintName, Table: pgErr.TableName, Code: pgErr.Code, Err: pgErr}
	}
	return err
}

// IsRetryable reports whether err is transient: the database could not be
// reached or answered with a connection or conflict error, so the same call
// may succeed when made again. It is true for ErrRetryTransaction (SQLSTATE
// class 40), a connection that failed, broke or was closed (dial and
// network errors, EOF, pgconn.ErrConnClosed, SQLSTATE class 08), a server
// shutting down or starting up (57P01 admin_shutdown, e.g.
// pg_terminate_backend; 57P02 crash_shutdown; 57P03 cannot_connect_now),
// too many connections (53300), a server that is no longer the primary
// (25006 read_only_sql_transaction: a standby, or a primary demoted in a
// failover whose connections live on; the write was not applied, and a
// new connection through a read-write URL reaches the new primary), a
// timeout (context.DeadlineExceeded,
// pgconn.Timeout) and anything pgconn.SafeToRetry accepts. It is false for
// nil, context.Canceled (the caller gave up) and every state sentinel
// (ErrNotFound, ErrLeaseLost, ErrInvalidTransition, …): those are answers,
// not failures.
//
// A transient error says nothing about whether the statement was applied:
// a write whose reply was lost may have committed. Every transition is safe
// to call again: the retry either applies it or reports the state it found
// (for example ErrInvalidTransition for a Complete that had committed).
func IsRetryable(err error) bool {
	if err == nil || errors.Is(err, context.Canceled) {
		return false
	}
	if errors.Is(err, ErrRetryTransaction) || errors.Is(err, context.DeadlineExceeded) ||
		errors.Is(err, pgconn.ErrConnClosed) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		return true
	}
	if pgconn.Timeout(err) || pgconn.SafeToRetry(err) {
		return true
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		switch code := pgErr.Code; {
		case len(code) == 5 && (code[:2] == "08" || code[:2] == "40"):
			return true
		case code == "57P01", code == "57P02", code == "57P03", code == "53300", code == "25006":
			return true
		}
		return false
	}
	var connectErr *pgconn.ConnectError
	if errors.As(err, &connectErr) {
		return true
	}
	var netErr net.Error
	return errors.As(err, &netErr)
}
