package repo

// The control plane's transitions of an existing attempt, the Go twin of
// db/queries/control.sql and in its order: ReleaseDeferred, Cancel and
// Supersede (EndAttempt) and RetryFailed, with their inputs (AttemptRef
// and each *Params) and the read that explains a refusal
// (explainControl).

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

// AttemptRef names an attempt for a control-plane call: tenant and space
// scope it, so another tenant's attempt is ErrNotFound.
type AttemptRef struct {
	// TenantID is the attempt's tenant, 1..255 characters.
	TenantID string
	// KnowledgeSpaceID is the attempt's space.
	KnowledgeSpaceID uuid.UUID
	// AttemptID is the attempt.
	AttemptID uuid.UUID
	// ExpectedRowVersion, when set, refuses the call with
	// ErrStaleRowVersion unless the row is at exactly this version.
	// Defaults to nil: no check.
	ExpectedRowVersion *int32
}

func (ref *AttemptRef) validate(v *validator) {
	if !set(v, "AttemptRef", ref) {
		return
	}
	v.text("TenantID", ref.TenantID, MaxTenantIDLength)
	v.uuid("KnowledgeSpaceID", ref.KnowledgeSpaceID)
	v.uuid("AttemptID", ref.AttemptID)
	if ref.ExpectedRowVersion != nil && *ref.ExpectedRowVersion < 0 {
		v.fail("ExpectedRowVersion", "must be >= 0")
	}
}

// ReleaseDeferredParams names the deferred attempt to release.
type ReleaseDeferredParams struct {
	// AttemptRef names the attempt (tenant, space, id, expected version).
	AttemptRef
}

// ReleaseDeferred makes a deferred start's outbox row due now.
//
// Errors: *InputError, ErrNotFound, ErrStaleRowVersion, *TransitionError
// (not dispatch_pending, or the outbox row is not deferred).
func (r *Repo) ReleaseDeferred(ctx context.Context, db DBTX, p *ReleaseDeferredParams) (*kfstype.Attempt, error) {
	v := r.call(ctx, db)
	if set(v, "ReleaseDeferredParams", p) {
		p.AttemptRef.validate(v)
	}
	if err := v.result(); err != nil {
		return nil, err
	}
	ref := &p.AttemptRef
	row, err := r.q.ReleaseDeferred(ctx, db, &gen.ReleaseDeferredParams{
		Now: r.now(), AttemptID: ref.AttemptID, TenantID: ref.TenantID,
		KnowledgeSpaceID: ref.KnowledgeSpaceID, ExpectedRowVersion: ref.ExpectedRowVersion,
	})
	if err != nil {
		return nil, r.explainControl(ctx, db, "release deferred", ref, kfstype.RunStateDispatchPending, err,
			func(a *kfstype.Attempt, o *kfstype.OutboxMessage) string {
				if a.RunState == kfstype.RunStateDispatchPending {
					return "outbox row is not deferred (available at " + o.AvailableAt.Format(time.RFC3339Nano) + ")"
				}
				return "only a dispatch_pending attempt can be released"
			})
	}
	return attemptFromRow(row), nil
}

// CancelParams names the attempt to cancel.
type CancelParams struct {
	// AttemptRef names the attempt (tenant, space, id, expected version).
	AttemptRef
	// Reason, when set, is stored as last_error_message with error code
	// CANCELED (cut to 4,096 characters). Defaults to nil: the attempt's
	// last error is kept.
	Reason *string
}

// Cancel ends a live attempt as canceled; its outbox row is canceled too.
//
// Errors: *InputError, ErrNotFound, ErrStaleRowVersion, *TransitionError
// (the attempt is already terminal).
//
// Runnable example: Example_cancel in package
// github.com/knowledgefs/kfsdb/kfsdbtest.
func (r *Repo) Cancel(ctx context.Context, db DBTX, p *CancelParams) (*kfstype.Attempt, error) {
	v := r.call(ctx, db)
	if set(v, "CancelParams", p) {
		p.AttemptRef.validate(v)
	}
	if err := v.result(); err != nil {
		return nil, err
	}
	return r.endAttempt(ctx, db, "cancel", &p.AttemptRef, p.Reason, kfstype.RunStateCanceled, kfstype.ErrorCodeCanceled)
}

// SupersedeParams names the attempt to supersede.
type SupersedeParams struct {
	// AttemptRef names the attempt (tenant, space, id, expected version).
	AttemptRef
	// Reason, when set, is stored as last_error_message with error code
	// SUPERSEDED (cut to 4,096 characters). Defaults to nil.
	Reason *string
}

// Supersede ends a live attempt as superseded (a newer document version
// made it moot); its outbox row is canceled.
//
// Errors: as Cancel.
func (r *Repo) Supersede(ctx context.Context, db DBTX, p *SupersedeParams) (*kfstype.Attempt, error) {
	v := r.call(ctx, db)
	if set(v, "SupersedeParams", p) {
		p.AttemptRef.validate(v)
	}
	if err := v.result(); err != nil {
		return nil, err
	}
	return r.endAttempt(ctx, db, "supersede", &p.AttemptRef, p.Reason, kfstype.RunStateSuperseded, kfstype.ErrorCodeSuperseded)
}

// endAttempt is Cancel and Supersede, over their one statement
// (EndAttempt): it ends a live attempt in state to, storing code with the
// reason when one is given.
func (r *Repo) endAttempt(ctx context.Context, db DBTX, verb string, ref *AttemptRef, reason *string, to kfstype.RunState, code string) (*kfstype.Attempt, error) {
	row, err := r.q.EndAttempt(ctx, db, &gen.EndAttemptParams{
		Now: r.now(), Reason: endReason(reason), RunState: string(to), ErrorCode: code, AttemptID: ref.AttemptID,
		TenantID: ref.TenantID, KnowledgeSpaceID: ref.KnowledgeSpaceID, ExpectedRowVersion: ref.ExpectedRowVersion,
	})
	if err != nil {
		return nil, r.explainControl(ctx, db, verb, ref, to, err, terminalReason)
	}
	return attemptFromRow(row), nil
}

// endReason is Cancel's and Supersede's reason as stored: cut and
// sanitized like a message, or nil.
func endReason(reason *string) *string {
	if reason == nil {
		return nil
	}
	cut := TruncateMessage(*reason)
	return &cut
}

func terminalReason(a *kfstype.Attempt, _ *kfstype.OutboxMessage) string {
	return "the attempt is already terminal"
}

// RetryFailedParams names the failed attempt to retry.
type RetryFailedParams struct {
	// AttemptRef names the attempt (tenant, space, id, expected version).
	AttemptRef
}

// RetryFailed reactivates a failed attempt in place (manual retry): live
// again, dispatch_pending, execution attempts reset, checkpoint and
// candidate kept so work resumes; its outbox row is pending again.
//
// Errors: *InputError, ErrNotFound, ErrStaleRowVersion, *TransitionError
// (not failed), ErrLiveAttemptExists (another attempt is live for the
// document version).
//
// Runnable example: Example_retryFailed in package
// github.com/knowledgefs/kfsdb/kfsdbtest.
func (r *Repo) RetryFailed(ctx context.Context, db DBTX, p *RetryFailedParams) (*kfstype.Attempt, error) {
	v := r.call(ctx, db)
	if set(v, "RetryFailedParams", p) {
		p.AttemptRef.validate(v)
	}
	if err := v.result(); err != nil {
		return nil, err
	}
	ref := &p.AttemptRef
	row, err := r.q.RetryFailed(ctx, db, &gen.RetryFailedParams{
		Now: r.now(), AttemptID: ref.AttemptID, TenantID: ref.TenantID,
		KnowledgeSpaceID: ref.KnowledgeSpaceID, ExpectedRowVersion: ref.ExpectedRowVersion,
	})
	if err != nil {
		if !errors.Is(err, pgx.ErrNoRows) {
			return nil, fmt.Errorf("retry failed attempt %s: %w", ref.AttemptID, mapError(err))
		}
		return nil, r.explainControl(ctx, db, "retry failed", ref, kfstype.RunStateDispatchPending, err,
			func(a *kfstype.Attempt, _ *kfstype.OutboxMessage) string {
				if a.RunState == kfstype.RunStateFailed {
					return "" // failed and at the expected version: the slot is taken
				}
				return "only a failed attempt can be retried"
			})
	}
	return attemptFromRow(row), nil
}

// explainControl turns a control-plane statement's error into the module's:
// for "no row" it reads the attempt to tell not found, stale version and
// invalid transition apart. reason explains the refusal for a row that
// exists at the expected version; an empty reason means another live
// attempt holds the slot.
func (r *Repo) explainControl(ctx context.Context, db DBTX, verb string, ref *AttemptRef, to kfstype.RunState, err error,
	reason func(*kfstype.Attempt, *kfstype.OutboxMessage) string,
) error {
	if !errors.Is(err, pgx.ErrNoRows) {
		return fmt.Errorf("%s attempt %s: %w", verb, ref.AttemptID, mapError(err))
	}
	a, o, _, rerr := r.getAttemptWithOutbox(ctx, db, ref.AttemptID, &ref.TenantID)
	switch {
	case errors.Is(rerr, ErrNotFound) || (rerr == nil && a.KnowledgeSpaceID != ref.KnowledgeSpaceID):
		return fmt.Errorf("%s attempt %s: %w", verb, ref.AttemptID, ErrNotFound)
	case rerr != nil:
		return fmt.Errorf("%s attempt %s: explain refusal: %w", verb, ref.AttemptID, rerr)
	case ref.ExpectedRowVersion != nil && a.RowVersion != *ref.ExpectedRowVersion:
		return fmt.Errorf("%s attempt %s: %w: expected %d, row is at %d", verb, ref.AttemptID, ErrStaleRowVersion, *ref.ExpectedRowVersion, a.RowVersion)
	}
	why := reason(a, o)
	if why == "" {
		return fmt.Errorf("%s attempt %s: %w", verb, ref.AttemptID, ErrLiveAttemptExists)
	}
	return &TransitionError{AttemptID: a.ID, Transition: verb, From: a.RunState, To: to, Checkpoint: a.Checkpoint, Reason: why, Attempt: a}
}
