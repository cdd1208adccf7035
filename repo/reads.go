package repo

// The plain reads, the Go twin of db/queries/reads.sql and in its order:
// GetAttempt, GetAttemptWithOutbox (and getAttemptWithOutbox, the read
// that explains a refused transition), ListDocumentVersionAttempts,
// CountLiveAttempts, TraceContexts and HeadRevision.

import (
	"context"
	"fmt"
	"time"

	"github.com/google/uuid"

	"github.com/knowledgefs/kfsdb/db/gen"
	"github.com/knowledgefs/kfsdb/kfstype"
)

// GetAttemptParams names one attempt of a tenant.
type GetAttemptParams struct {
	// TenantID is the attempt's tenant, 1..255 characters.
	TenantID string
	// AttemptID is the attempt.
	AttemptID uuid.UUID
}

// GetAttempt reads one attempt of a tenant.
//
// Errors: *InputError, ErrNotFound (also for another tenant's attempt).
func (r *Repo) GetAttempt(ctx context.Context, db DBTX, p *GetAttemptParams) (*kfstype.Attempt, error) {
	v := r.call(ctx, db)
	p.validate(v, "GetAttemptParams")
	if err := v.result(); err != nil {
		return nil, err
	}
	row, err := r.q.GetAttempt(ctx, db, &gen.GetAttemptParams{ID: p.AttemptID, TenantID: p.TenantID})
	if err != nil {
		return nil, fmt.Errorf("get attempt %s: %w", p.AttemptID, mapError(err))
	}
	return attemptFromRow(row), nil
}

// validate checks p, a GetAttemptParams or (converted) a
// GetAttemptWithOutboxParams, which params names.
func (p *GetAttemptParams) validate(v *validator, params string) {
	if set(v, params, p) {
		v.text("TenantID", p.TenantID, MaxTenantIDLength)
		v.uuid("AttemptID", p.AttemptID)
	}
}

// GetAttemptWithOutboxParams names one attempt of a tenant; its fields
// are GetAttemptParams'.
type GetAttemptWithOutboxParams GetAttemptParams

// GetAttemptWithOutbox reads an attempt of a tenant and its outbox row.
//
// Errors: *InputError, ErrNotFound.
func (r *Repo) GetAttemptWithOutbox(ctx context.Context, db DBTX, p *GetAttemptWithOutboxParams) (*kfstype.Attempt, *kfstype.OutboxMessage, error) {
	v := r.call(ctx, db)
	(*GetAttemptParams)(p).validate(v, "GetAttemptWithOutboxParams")
	if err := v.result(); err != nil {
		return nil, nil, err
	}
	a, o, _, err := r.getAttemptWithOutbox(ctx, db, p.AttemptID, &p.TenantID)
	if err != nil {
		return nil, nil, fmt.Errorf("get attempt %s with outbox: %w", p.AttemptID, err)
	}
	return a, o, nil
}

// getAttemptWithOutbox loads an attempt with its outbox row and the
// statement clock; tenantID nil reads any tenant's attempt. It is also the
// read that explains a refused transition: when a guarded write matched no
// row, explainControl, explainDelivery and explainLease read the row with
// it to say why.
func (r *Repo) getAttemptWithOutbox(ctx context.Context, db DBTX, id uuid.UUID, tenantID *string) (*kfstype.Attempt, *kfstype.OutboxMessage, time.Time, error) {
	row, err := r.q.GetAttemptWithOutbox(ctx, db, &gen.GetAttemptWithOutboxParams{Now: r.now(), ID: id, TenantID: tenantID})
	if err != nil {
		return nil, nil, time.Time{}, mapError(err)
	}
	return attemptFromRow(&row.DocumentCompilationAttempt), outboxFromRow(&row.DocumentCompilationOutbox), row.DbNow.UTC(), nil
}

// ListDocumentVersionAttemptsParams names a tenant's document version.
type ListDocumentVersionAttemptsParams struct {
	// TenantID is the version's tenant, 1..255 characters.
	TenantID string
	// KnowledgeSpaceID is the tenant's space.
	KnowledgeSpaceID uuid.UUID
	// DocumentAssetID is the document asset.
	DocumentAssetID uuid.UUID
	// DocumentVersion is the asset's version, > 0.
	DocumentVersion int32
}

// ListDocumentVersionAttempts lists every attempt of a document version,
// oldest first.
//
// Errors: *InputError.
func (r *Repo) ListDocumentVersionAttempts(ctx context.Context, db DBTX, p *ListDocumentVersionAttemptsParams) ([]*kfstype.Attempt, error) {
	v := r.call(ctx, db)
	if set(v, "ListDocumentVersionAttemptsParams", p) {
		v.text("TenantID", p.TenantID, MaxTenantIDLength)
		v.uuid("KnowledgeSpaceID", p.KnowledgeSpaceID)
		v.uuid("DocumentAssetID", p.DocumentAssetID)
		v.positive("DocumentVersion", p.DocumentVersion)
	}
	if err := v.result(); err != nil {
		return nil, err
	}
	rows, err := r.q.ListDocumentVersionAttempts(ctx, db, &gen.ListDocumentVersionAttemptsParams{
		KnowledgeSpaceID: p.KnowledgeSpaceID, DocumentAssetID: p.DocumentAssetID,
		DocumentVersion: p.DocumentVersion, TenantID: p.TenantID,
	})
	if err != nil {
		return nil, fmt.Errorf("list attempts of asset %s v%d: %w", p.DocumentAssetID, p.DocumentVersion, mapError(err))
	}
	out := make([]*kfstype.Attempt, len(rows))
	for i, row := range rows {
		out[i] = attemptFromRow(row)
	}
	return out, nil
}

// CountLiveAttemptsParams names the tenant whose live attempts are counted.
type CountLiveAttemptsParams struct {
	// TenantID is the tenant, 1..255 characters.
	TenantID string
}

// CountLiveAttempts counts a tenant's live attempts per run state; states
// with none are absent.
//
// Errors: *InputError.
func (r *Repo) CountLiveAttempts(ctx context.Context, db DBTX, p *CountLiveAttemptsParams) (map[kfstype.RunState]int64, error) {
	v := r.call(ctx, db)
	if set(v, "CountLiveAttemptsParams", p) {
		v.text("TenantID", p.TenantID, MaxTenantIDLength)
	}
	if err := v.result(); err != nil {
		return nil, err
	}
	rows, err := r.q.CountLiveAttempts(ctx, db, p.TenantID)
	if err != nil {
		return nil, fmt.Errorf("count live attempts of tenant %q: %w", p.TenantID, mapError(err))
	}
	out := make(map[kfstype.RunState]int64, len(rows))
	for _, row := range rows {
		out[row.RunState] = row.Attempts
	}
	return out, nil
}

// TraceContextsParams names the attempts whose trace contexts are read.
type TraceContextsParams struct {
	// AttemptIDs are 1..MaxBatchSize attempts, of any tenant; none is the
	// zero UUID.
	AttemptIDs []uuid.UUID
}

// TraceContexts reads the trace contexts that Start stored with up to
// MaxBatchSize attempts, of any tenant: the relay and the PostgreSQL
// source read them for a batch they claimed or fetched, when configured
// to carry them. Attempts started without one are absent from the map.
//
// Errors: *InputError (no ids, more than MaxBatchSize, a zero id).
func (r *Repo) TraceContexts(ctx context.Context, db DBTX, p *TraceContextsParams) (map[uuid.UUID]kfstype.TraceContext, error) {
	v := r.call(ctx, db)
	if !set(v, "TraceContextsParams", p) || v.err != nil {
		return nil, v.result()
	}
	if len(p.AttemptIDs) == 0 || len(p.AttemptIDs) > MaxBatchSize {
		v.fail("AttemptIDs", fmt.Sprintf("must hold 1..%d ids", MaxBatchSize))
	}
	for i, id := range p.AttemptIDs {
		v.uuid(fmt.Sprintf("AttemptIDs[%d]", i), id)
	}
	if err := v.result(); err != nil {
		return nil, err
	}
	rows, err := r.q.TraceContexts(ctx, db, p.AttemptIDs)
	if err != nil {
		return nil, fmt.Errorf("read trace contexts of %d attempts: %w", len(p.AttemptIDs), mapError(err))
	}
	out := make(map[uuid.UUID]kfstype.TraceContext, len(rows))
	for _, row := range rows {
		out[row.AttemptID] = kfstype.TraceContext{TraceParent: row.Traceparent, TraceState: row.Tracestate}
	}
	return out, nil
}

// HeadRevisionParams names a tenant's knowledge space.
type HeadRevisionParams struct {
	// TenantID is the space's tenant, 1..255 characters.
	TenantID string
	// KnowledgeSpaceID is the space.
	KnowledgeSpaceID uuid.UUID
}

// HeadRevision reads the publication head revision of a tenant's space:
// the BaseHeadRevision a Start of one of its documents must carry (0 while
// the space has no head). The platform bumps the head when it promotes a
// candidate publication, so a Start in the same transaction as this read
// cannot get a *HeadConflictError unless that transaction's snapshot is
// older than the bump.
//
// Errors: *InputError, ErrNotFound (no such space, or another tenant's).
func (r *Repo) HeadRevision(ctx context.Context, db DBTX, p *HeadRevisionParams) (int32, error) {
	v := r.call(ctx, db)
	if set(v, "HeadRevisionParams", p) {
		v.text("TenantID", p.TenantID, MaxTenantIDLength)
		v.uuid("KnowledgeSpaceID", p.KnowledgeSpaceID)
	}
	if err := v.result(); err != nil {
		return 0, err
	}
	rev, err := r.q.HeadRevision(ctx, db, &gen.HeadRevisionParams{
		KnowledgeSpaceID: p.KnowledgeSpaceID, TenantID: p.TenantID,
	})
	if err != nil {
		return 0, fmt.Errorf("head revision of space %s: %w", p.KnowledgeSpaceID, mapError(err))
	}
	return rev, nil
}
