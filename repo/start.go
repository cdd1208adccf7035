package repo

// Starting attempts, the Go twin of db/queries/start.sql and in its
// order: Start (StartPreconditions says why a Start inserted nothing) and
// StartMany, its batch, with their inputs (StartParams, StartManyParams).

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

// MaxExecutionAttemptsDefault is StartParams.MaxExecutionAttempts when zero.
const MaxExecutionAttemptsDefault = 5

// StartParams identifies the document version to compile.
type StartParams struct {
	// TenantID owns the space, 1..255 characters.
	TenantID string
	// KnowledgeSpaceID is the tenant's space the document belongs to.
	KnowledgeSpaceID uuid.UUID
	// DocumentAssetID is the document asset; with DocumentVersion it names
	// the version to compile, which must exist.
	DocumentAssetID uuid.UUID
	// DocumentVersion must be > 0.
	DocumentVersion int32
	// PublicationGenerationID is the caller's generation id, stored as is.
	PublicationGenerationID uuid.UUID
	// BaseHeadRevision must equal the space's publication head revision
	// (0 when the space has none), or Start returns *HeadConflictError.
	BaseHeadRevision int32
	// MaxExecutionAttempts bounds AcquireLease. Defaults to
	// MaxExecutionAttemptsDefault.
	MaxExecutionAttempts int32
	// Deferred parks the outbox row (available_at = infinity) until
	// ReleaseDeferred. Defaults to false: due at once.
	Deferred bool
	// AvailableAt delays the first publication. Defaults to now; not
	// allowed with Deferred.
	AvailableAt *time.Time
	// TraceContext is the caller's trace context (adapters/otel's
	// TraceContext(ctx) gives it), stored with a created attempt in the
	// same statement so that the worker's span joins the Start's trace. A
	// Start that finds a live attempt stores nothing. Defaults to none:
	// nothing is stored.
	TraceContext kfstype.TraceContext
}

func (p *StartParams) validate(v *validator) {
	if !set(v, "StartParams", p) {
		return
	}
	v.text("TenantID", p.TenantID, MaxTenantIDLength)
	v.uuid("KnowledgeSpaceID", p.KnowledgeSpaceID)
	v.uuid("DocumentAssetID", p.DocumentAssetID)
	v.positive("DocumentVersion", p.DocumentVersion)
	v.uuid("PublicationGenerationID", p.PublicationGenerationID)
	if p.BaseHeadRevision < 0 {
		v.fail("BaseHeadRevision", "must be >= 0")
	}
	if p.MaxExecutionAttempts < 0 {
		v.fail("MaxExecutionAttempts", "must be > 0 (or 0 for the default)")
	}
	if p.Deferred && p.AvailableAt != nil {
		v.fail("AvailableAt", "must not be set on a deferred start")
	}
	if p.AvailableAt != nil {
		v.timestamp("AvailableAt", *p.AvailableAt)
	}
	v.traceContext("TraceContext", p.TraceContext)
}

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

// StartManyParams is a batch of starts.
type StartManyParams struct {
	// Starts are the document versions to start, 1..MaxBatchSize of them,
	// each named once. Deferred, AvailableAt and TraceContext must be
	// unset (use Start).
	Starts []*StartParams
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
