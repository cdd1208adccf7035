package repo

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"

	"github.com/google/uuid"

	"github.com/knowledgefs/kfsdb/db/gen"
	"github.com/knowledgefs/kfsdb/kfstype"
)

// GetAttempt reads one attempt of a tenant.
//
// Errors: *InputError, ErrNotFound (also for another tenant's attempt).
func (r *Repo) GetAttempt(ctx context.Context, db DBTX, tenantID string, id uuid.UUID) (*kfstype.Attempt, error) {
	v := r.call(ctx, db)
	v.text("TenantID", tenantID, MaxTenantIDLength)
	v.uuid("AttemptID", id)
	if err := v.result(); err != nil {
		return nil, err
	}
	row, err := r.q.AttemptGetByID(ctx, db, &gen.AttemptGetByIDParams{ID: id, TenantID: tenantID})
	if err != nil {
		return nil, fmt.Errorf("get attempt %s: %w", id, mapError(err))
	}
	return attemptFromRow(row), nil
}

// GetAttemptWithOutbox reads an attempt of a tenant and its outbox row.
//
// Errors: *InputError, ErrNotFound.
func (r *Repo) GetAttemptWithOutbox(ctx context.Context, db DBTX, tenantID string, id uuid.UUID) (*kfstype.Attempt, *kfstype.OutboxMessage, error) {
	v := r.call(ctx, db)
	v.text("TenantID", tenantID, MaxTenantIDLength)
	v.uuid("AttemptID", id)
	if err := v.result(); err != nil {
		return nil, nil, err
	}
	a, o, _, err := r.read(ctx, db, id, &tenantID)
	if err != nil {
		return nil, nil, fmt.Errorf("get attempt %s with outbox: %w", id, err)
	}
	return a, o, nil
}

// HeadRevision reads the publication head revision of a tenant's space:
// the BaseHeadRevision a Start of one of its documents must carry (0 while
// the space has no head). The platform bumps the head when it promotes a
// candidate publication, so a Start in the same transaction as this read
// cannot get a *HeadConflictError unless that transaction's snapshot is
// older than the bump.
//
// Errors: *InputError, ErrNotFound (no such space, or another tenant's).
func (r *Repo) HeadRevision(ctx context.Context, db DBTX, tenantID string, knowledgeSpaceID uuid.UUID) (int32, error) {
	v := r.call(ctx, db)
	v.text("TenantID", tenantID, MaxTenantIDLength)
	v.uuid("KnowledgeSpaceID", knowledgeSpaceID)
	if err := v.result(); err != nil {
		return 0, err
	}
	rev, err := r.q.PublicationHeadGetRevision(ctx, db, &gen.PublicationHeadGetRevisionParams{
		KnowledgeSpaceID: knowledgeSpaceID, TenantID: tenantID,
	})
	if err != nil {
		return 0, fmt.Errorf("head revision of space %s: %w", knowledgeSpaceID, mapError(err))
	}
	return rev, nil
}

// DocumentVersion names a tenant's document version.
type DocumentVersion struct {
	TenantID         string
	KnowledgeSpaceID uuid.UUID
	DocumentAssetID  uuid.UUID
	DocumentVersion  int32
}

// ListDocumentVersionAttempts lists every attempt of a document version,
// oldest first.
//
// Errors: *InputError.
func (r *Repo) ListDocumentVersionAttempts(ctx context.Context, db DBTX, dv *DocumentVersion) ([]*kfstype.Attempt, error) {
	v := r.call(ctx, db)
	if set(v, "DocumentVersion", dv) {
		v.text("TenantID", dv.TenantID, MaxTenantIDLength)
		v.uuid("KnowledgeSpaceID", dv.KnowledgeSpaceID)
		v.uuid("DocumentAssetID", dv.DocumentAssetID)
		v.positive("DocumentVersion", dv.DocumentVersion)
	}
	if err := v.result(); err != nil {
		return nil, err
	}
	rows, err := r.q.AttemptListByDocumentVersion(ctx, db, &gen.AttemptListByDocumentVersionParams{
		KnowledgeSpaceID: dv.KnowledgeSpaceID, DocumentAssetID: dv.DocumentAssetID,
		DocumentVersion: dv.DocumentVersion, TenantID: dv.TenantID,
	})
	if err != nil {
		return nil, fmt.Errorf("list attempts of asset %s v%d: %w", dv.DocumentAssetID, dv.DocumentVersion, mapError(err))
	}
	out := make([]*kfstype.Attempt, len(rows))
	for i, row := range rows {
		out[i] = attemptFromRow(row)
	}
	return out, nil
}

// CountLiveAttempts counts a tenant's live attempts per run state; states
// with none are absent.
//
// Errors: *InputError.
func (r *Repo) CountLiveAttempts(ctx context.Context, db DBTX, tenantID string) (map[kfstype.RunState]int64, error) {
	v := r.call(ctx, db)
	v.text("TenantID", tenantID, MaxTenantIDLength)
	if err := v.result(); err != nil {
		return nil, err
	}
	rows, err := r.q.AttemptCountLiveByRunState(ctx, db, tenantID)
	if err != nil {
		return nil, fmt.Errorf("count live attempts of tenant %q: %w", tenantID, mapError(err))
	}
	out := make(map[kfstype.RunState]int64, len(rows))
	for _, row := range rows {
		out[row.RunState] = row.Attempts
	}
	return out, nil
}

func decodePayload(raw []byte) (*kfstype.Payload, error) {
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(raw, &fields); err != nil || fields == nil {
		return nil, &InputError{Field: "Payload", Reason: "must be a JSON object"}
	}
	if len(fields) != 1 || fields["attemptId"] == nil {
		return nil, &InputError{Field: "Payload", Reason: `must hold exactly the key "attemptId"`}
	}
	var s string
	if err := json.Unmarshal(fields["attemptId"], &s); err != nil {
		return nil, &InputError{Field: "Payload.attemptId", Reason: "must be a string"}
	}
	id, err := uuid.Parse(s)
	if err != nil || id == uuid.Nil || len(s) != 36 {
		return nil, &InputError{Field: "Payload.attemptId", Reason: "must be a non-zero UUID in canonical form"}
	}
	// Reject duplicate keys, which map decoding would silently merge.
	if bytes.Count(raw, []byte(`"attemptId"`)) != 1 {
		return nil, &InputError{Field: "Payload", Reason: `must hold "attemptId" once`}
	}
	return &kfstype.Payload{AttemptID: id}, nil
}

// TraceContexts reads the trace contexts that Start stored with up to
// MaxBatchSize attempts, of any tenant: the relay and the PostgreSQL
// source read them for a batch they claimed or fetched, when configured
// to carry them. Attempts started without one are absent from the map.
//
// Errors: *InputError (no ids, more than MaxBatchSize, a zero id).
func (r *Repo) TraceContexts(ctx context.Context, db DBTX, attemptIDs []uuid.UUID) (map[uuid.UUID]kfstype.TraceContext, error) {
	v := r.call(ctx, db)
	if len(attemptIDs) == 0 || len(attemptIDs) > MaxBatchSize {
		v.fail("AttemptIDs", fmt.Sprintf("must hold 1..%d ids", MaxBatchSize))
	}
	for i, id := range attemptIDs {
		v.uuid(fmt.Sprintf("AttemptIDs[%d]", i), id)
	}
	if err := v.result(); err != nil {
		return nil, err
	}
	rows, err := r.q.TraceContextGetMany(ctx, db, attemptIDs)
	if err != nil {
		return nil, fmt.Errorf("read trace contexts of %d attempts: %w", len(attemptIDs), mapError(err))
	}
	out := make(map[uuid.UUID]kfstype.TraceContext, len(rows))
	for _, row := range rows {
		out[row.AttemptID] = kfstype.TraceContext{TraceParent: row.Traceparent, TraceState: row.Tracestate}
	}
	return out, nil
}
