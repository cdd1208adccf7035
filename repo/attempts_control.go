package repo

// The control plane's transitions, the Go twin of db/queries/attempts_control.sql
// and in its order: Start (and StartMany, its batch), ReleaseDeferred,
// Cancel and Supersede (EndAttempt), RetryFailed and Purge.

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/knowledgefs/kfsdb/db/gen"
	"github.com/knowledgefs/kfsdb/kfstype"
)

// StartResult is Start's outcome.
type StartResult struct {
	// Attempt is the created attempt, or the live one that was found.
	Attempt *kfstype.Attempt
	// Created is false when a live attempt for the document version
	// already existed; Attempt is then that attempt, unchanged.
	Created bool
}

// startRaceRetries bounds how often Start re-runs when a concurrent Start
// held the active slot but that attempt ended before we could read it.
const startRaceRetries = 3

// Start creates an attempt for a document version with its outbox row, in
// one statement, or returns the version's live attempt (Created false).
// Run it inside your own transaction to start a compilation atomically with
// your own writes (the outbox pattern).
//
// Errors: *InputError; ErrNotFound (space not in the tenant, or asset
// version missing); *HeadConflictError; ErrRetryTransaction when the
// caller's REPEATABLE READ or SERIALIZABLE transaction raced a concurrent
// Start of the same version (PostgreSQL aborts it: run it again).
//
// Runnable examples: Example_start and Example_startInTransaction in
// package github.com/knowledgefs/kfsdb/kfsdbtest.
func (r *Repo) Start(ctx context.Context, db DBTX, p *StartParams) (*StartResult, error) {
	v := r.call(ctx, db)
	p.validate(v)
	if err := v.result(); err != nil {
		return nil, err
	}
	maxAttempts := p.MaxExecutionAttempts
	if maxAttempts == 0 {
		maxAttempts = MaxExecutionAttemptsDefault
	}
	var traceParent, traceState *string
	if !p.TraceContext.IsZero() {
		traceParent, traceState = &p.TraceContext.TraceParent, &p.TraceContext.TraceState
	}
	for range startRaceRetries {
		id, err := uuid.NewV7()
		if err != nil {
			return nil, fmt.Errorf("start attempt: new id: %w", err)
		}
		outboxID, err := uuid.NewV7()
		if err != nil {
			return nil, fmt.Errorf("start attempt: new outbox id: %w", err)
		}
		row, err := r.q.Start(ctx, db, &gen.StartParams{
			TenantID:                p.TenantID,
			KnowledgeSpaceID:        p.KnowledgeSpaceID,
			DocumentAssetID:         p.DocumentAssetID,
			DocumentVersion:         p.DocumentVersion,
			BaseHeadRevision:        p.BaseHeadRevision,
			ID:                      id,
			PublicationGenerationID: p.PublicationGenerationID,
			MaxExecutionAttempts:    maxAttempts,
			Now:                     r.now(),
			OutboxID:                outboxID,
			Deferred:                p.Deferred,
			AvailableAt:             p.AvailableAt,
			Traceparent:             traceParent,
			Tracestate:              traceState,
		})
		if err == nil {
			return &StartResult{Attempt: attemptFromStartRow(row), Created: row.ID == id}, nil
		}
		if !errors.Is(err, pgx.ErrNoRows) {
			return nil, fmt.Errorf("start attempt for asset %s v%d: %w", p.DocumentAssetID, p.DocumentVersion, mapError(err))
		}
		pre, err := r.q.StartPreconditions(ctx, db, &gen.StartPreconditionsParams{
			KnowledgeSpaceID: p.KnowledgeSpaceID,
			TenantID:         p.TenantID,
			DocumentAssetID:  p.DocumentAssetID,
			DocumentVersion:  p.DocumentVersion,
		})
		if err != nil {
			return nil, fmt.Errorf("start attempt: check preconditions: %w", mapError(err))
		}
		switch {
		case pre.LiveAttemptID != uuid.Nil:
			live, err := r.q.GetAttempt(ctx, db, &gen.GetAttemptParams{ID: pre.LiveAttemptID, TenantID: p.TenantID})
			if errors.Is(err, pgx.ErrNoRows) {
				continue // purged in between: start over
			}
			if err != nil {
				return nil, fmt.Errorf("start attempt: read live attempt %s: %w", pre.LiveAttemptID, mapError(err))
			}
			if live.ActiveSlot == nil {
				continue // ended in between: start over
			}
			return &StartResult{Attempt: attemptFromRow(live), Created: false}, nil
		case !pre.SpaceExists:
			return nil, fmt.Errorf("start attempt: knowledge space %s of tenant %q: %w", p.KnowledgeSpaceID, p.TenantID, ErrNotFound)
		case !pre.AssetVersionExists:
			return nil, fmt.Errorf("start attempt: document asset %s version %d: %w", p.DocumentAssetID, p.DocumentVersion, ErrNotFound)
		case pre.HeadRevision != p.BaseHeadRevision:
			return nil, &HeadConflictError{Expected: p.BaseHeadRevision, Actual: pre.HeadRevision}
		}
		// Every precondition holds and no live attempt is visible: a
		// concurrent Start took the slot after our snapshot and ended
		// since. Try again.
	}
	return nil, fmt.Errorf("start attempt for asset %s v%d: %w (concurrent start not visible to this transaction)", p.DocumentAssetID, p.DocumentVersion, ErrLiveAttemptExists)
}

func attemptFromStartRow(row *gen.StartRow) *kfstype.Attempt {
	a := gen.DocumentCompilationAttempt{
		ID:                      row.ID,
		TenantID:                row.TenantID,
		KnowledgeSpaceID:        row.KnowledgeSpaceID,
		DocumentAssetID:         row.DocumentAssetID,
		DocumentVersion:         row.DocumentVersion,
		PublicationGenerationID: row.PublicationGenerationID,
		BaseHeadRevision:        row.BaseHeadRevision,
		CandidatePublicationID:  row.CandidatePublicationID,
		CandidateFingerprint:    row.CandidateFingerprint,
		Checkpoint:              kfstype.Checkpoint(row.Checkpoint),
		RunState:                kfstype.RunState(row.RunState),
		ActiveSlot:              row.ActiveSlot,
		ExecutionAttempts:       row.ExecutionAttempts,
		MaxExecutionAttempts:    row.MaxExecutionAttempts,
		QueueJobID:              row.QueueJobID,
		ExternalJobID:           row.ExternalJobID,
		WorkerID:                row.WorkerID,
		LeaseToken:              row.LeaseToken,
		LeaseExpiresAt:          row.LeaseExpiresAt,
		HeartbeatAt:             row.HeartbeatAt,
		RetryAt:                 row.RetryAt,
		LastErrorCode:           row.LastErrorCode,
		LastErrorMessage:        row.LastErrorMessage,
		RowVersion:              row.RowVersion,
		CreatedAt:               row.CreatedAt,
		UpdatedAt:               row.UpdatedAt,
		StartedAt:               row.StartedAt,
		CompletedAt:             row.CompletedAt,
	}
	return attemptFromRow(&a)
}

// StartManyResult is one entry of StartMany's result, in input order.
type StartManyResult struct {
	// Attempt is the entry's created or live attempt; nil with Err.
	Attempt *kfstype.Attempt
	// Created is as StartResult.Created.
	Created bool
	// Err is the entry's own refusal (ErrNotFound, *HeadConflictError, …);
	// the other entries are unaffected.
	Err error
}

// StartMany starts up to 100 document versions in one statement: each
// entry is created with its outbox row, or its live attempt is returned.
// Each entry the statement neither created nor returned (it failed a
// precondition) then goes through Start alone, which runs its statement
// and the read that explains the refusal: two more statements per refused
// entry (three if a concurrent Start raced it), reported in its Err, or
// its attempt if it could start after all. Deferred, AvailableAt and
// TraceContext are not supported in a batch.
//
// Errors: *InputError for the batch (it names the entry); a database error
// fails the whole batch.
func (r *Repo) StartMany(ctx context.Context, db DBTX, p *StartManyParams) ([]StartManyResult, error) {
	if v := r.call(ctx, db); !set(v, "StartManyParams", p) || v.err != nil {
		return nil, v.result()
	}
	ps := p.Starts
	if len(ps) == 0 || len(ps) > MaxBatchSize {
		return nil, &InputError{Field: "Starts", Reason: fmt.Sprintf("must hold 1..%d entries", MaxBatchSize)}
	}
	n := len(ps)
	arg := &gen.StartManyParams{
		IDs: make([]uuid.UUID, n), OutboxIDs: make([]uuid.UUID, n), TenantIDs: make([]string, n),
		KnowledgeSpaceIDs: make([]uuid.UUID, n), DocumentAssetIDs: make([]uuid.UUID, n),
		DocumentVersions: make([]int32, n), PublicationGenerationIDs: make([]uuid.UUID, n),
		BaseHeadRevisions: make([]int32, n), MaxExecutionAttempts: make([]int32, n), Now: r.now(),
	}
	type versionKey struct {
		tenant       string
		space, asset uuid.UUID
		version      int32
	}
	index := make(map[versionKey]int, n)
	for i, p := range ps {
		if p == nil {
			return nil, &InputError{Field: fmt.Sprintf("Starts[%d]", i), Reason: "must not be nil"}
		}
		if err := entryError("Starts", i, p.validate); err != nil {
			return nil, err
		}
		if p.Deferred || p.AvailableAt != nil {
			return nil, &InputError{Field: fmt.Sprintf("Starts[%d].Deferred", i), Reason: "deferred or delayed starts are not supported in a batch"}
		}
		if !p.TraceContext.IsZero() {
			return nil, &InputError{Field: fmt.Sprintf("Starts[%d].TraceContext", i), Reason: "trace contexts are not supported in a batch (use Start)"}
		}
		k := versionKey{p.TenantID, p.KnowledgeSpaceID, p.DocumentAssetID, p.DocumentVersion}
		if _, dup := index[k]; dup {
			return nil, &InputError{Field: fmt.Sprintf("Starts[%d]", i), Reason: "names a document version twice in the batch"}
		}
		index[k] = i
		var err error
		if arg.IDs[i], err = uuid.NewV7(); err != nil {
			return nil, fmt.Errorf("start attempts: new id: %w", err)
		}
		if arg.OutboxIDs[i], err = uuid.NewV7(); err != nil {
			return nil, fmt.Errorf("start attempts: new outbox id: %w", err)
		}
		arg.TenantIDs[i], arg.KnowledgeSpaceIDs[i], arg.DocumentAssetIDs[i] = p.TenantID, p.KnowledgeSpaceID, p.DocumentAssetID
		arg.DocumentVersions[i], arg.PublicationGenerationIDs[i], arg.BaseHeadRevisions[i] = p.DocumentVersion, p.PublicationGenerationID, p.BaseHeadRevision
		arg.MaxExecutionAttempts[i] = cmp.Or(p.MaxExecutionAttempts, MaxExecutionAttemptsDefault)
	}
	rows, err := r.q.StartMany(ctx, db, arg)
	if err != nil {
		return nil, fmt.Errorf("start %d attempts: %w", n, mapError(err))
	}
	out := make([]StartManyResult, n)
	done := make([]bool, n)
	for _, row := range rows {
		single := gen.StartRow(*row)
		i, ok := index[versionKey{row.TenantID, row.KnowledgeSpaceID, row.DocumentAssetID, row.DocumentVersion}]
		if !ok || done[i] {
			continue
		}
		out[i] = StartManyResult{Attempt: attemptFromStartRow(&single), Created: row.ID == arg.IDs[i]}
		done[i] = true
	}
	for i, p := range ps {
		if done[i] {
			continue
		}
		res, err := r.Start(ctx, db, p)
		if err != nil {
			out[i] = StartManyResult{Err: err}
			continue
		}
		out[i] = StartManyResult{Attempt: res.Attempt, Created: res.Created}
	}
	return out, nil
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

// Purge deletes up to BatchSize terminal attempts of one tenant completed
// before the cut-off, oldest first, skipping rows another transaction
// holds; their outbox rows go by cascade. Call it until it returns fewer
// than BatchSize.
//
// Errors: *InputError.
func (r *Repo) Purge(ctx context.Context, db DBTX, p *PurgeParams) (int, error) {
	v := r.call(ctx, db)
	if set(v, "PurgeParams", p) {
		v.text("TenantID", p.TenantID, MaxTenantIDLength)
		if p.CompletedBefore.IsZero() {
			v.fail("CompletedBefore", "must be set")
		}
		v.timestamp("CompletedBefore", p.CompletedBefore)
		if p.BatchSize < 0 || p.BatchSize > MaxPurgeBatch {
			v.fail("BatchSize", "must be 1.."+fmt.Sprint(MaxPurgeBatch)+" (or 0 for the default)")
		}
	}
	if err := v.result(); err != nil {
		return 0, err
	}
	batch := p.BatchSize
	if batch == 0 {
		batch = PurgeBatchSizeDefault
	}
	ids, err := r.q.Purge(ctx, customPlanned{db}, &gen.PurgeParams{TenantID: p.TenantID, CompletedBefore: p.CompletedBefore, BatchSize: batch})
	if err != nil {
		return 0, fmt.Errorf("purge attempts of tenant %q: %w", p.TenantID, mapError(err))
	}
	return len(ids), nil
}
