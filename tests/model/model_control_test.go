package model_test

import (
	"github.com/google/uuid"

	"github.com/knowledgefs/kfsdb/kfstype"
	"github.com/knowledgefs/kfsdb/repo"
)

// Start: returns the live attempt when there is one; otherwise create is
// true and the caller records the new rows with created.
func (m *model) start(p *repo.StartParams) (existing *attemptModel, create bool, cls errClass) {
	switch {
	case p.DocumentVersion <= 0 || p.MaxExecutionAttempts < 0 || (p.Deferred && p.AvailableAt != nil):
		return nil, false, clsInvalidInput
	}
	scope := m.scopeOf(p.TenantID, p.KnowledgeSpaceID, p.DocumentAssetID, p.DocumentVersion)
	if scope < 0 {
		return nil, false, clsNotFound
	}
	if live := m.live(scope); live != nil {
		return live, false, clsOK
	}
	if p.BaseHeadRevision != m.heads[scope] {
		return nil, false, clsHeadConflict
	}
	return nil, true, clsOK
}

func (m *model) created(p *repo.StartParams, id, outboxID uuid.UUID) *attemptModel {
	scope := m.scopeOf(p.TenantID, p.KnowledgeSpaceID, p.DocumentAssetID, p.DocumentVersion)
	maxAttempts := p.MaxExecutionAttempts
	if maxAttempts == 0 {
		maxAttempts = repo.MaxExecutionAttemptsDefault
	}
	available := m.now
	switch {
	case p.Deferred:
		available = kfstype.Forever
	case p.AvailableAt != nil:
		available = *p.AvailableAt
	}
	am := &attemptModel{
		scope: scope,
		a: kfstype.Attempt{
			ID: id, TenantID: p.TenantID, KnowledgeSpaceID: p.KnowledgeSpaceID,
			DocumentAssetID: p.DocumentAssetID, DocumentVersion: p.DocumentVersion,
			PublicationGenerationID: p.PublicationGenerationID, BaseHeadRevision: p.BaseHeadRevision,
			Checkpoint: kfstype.CheckpointQueued, RunState: kfstype.RunStateDispatchPending, Active: true,
			MaxExecutionAttempts: maxAttempts, CreatedAt: m.now, UpdatedAt: m.now,
		},
		o: kfstype.OutboxMessage{
			ID: outboxID, AttemptID: id, EventType: kfstype.EventTypeDocumentCompile,
			SchemaVersion: kfstype.EventSchemaVersion, IdempotencyKey: "document.compile:" + id.String(),
			Status: kfstype.OutboxStatusPending, AvailableAt: available, CreatedAt: m.now, UpdatedAt: m.now,
		},
	}
	m.attempts = append(m.attempts, am)
	return am
}

// control resolves a control-plane reference: not found (another tenant
// or space, or no such attempt), then a stale expected row version.
func (m *model) control(ref *repo.AttemptRef) (*attemptModel, errClass) {
	if ref.TenantID == "" || ref.KnowledgeSpaceID == uuid.Nil || ref.AttemptID == uuid.Nil ||
		(ref.ExpectedRowVersion != nil && *ref.ExpectedRowVersion < 0) {
		return nil, clsInvalidInput
	}
	am := m.find(ref.AttemptID)
	if am == nil || am.a.TenantID != ref.TenantID || am.a.KnowledgeSpaceID != ref.KnowledgeSpaceID {
		return nil, clsNotFound
	}
	if ref.ExpectedRowVersion != nil && *ref.ExpectedRowVersion != am.a.RowVersion {
		return nil, clsStaleRowVersion
	}
	return am, clsOK
}

func (m *model) releaseDeferred(ref *repo.AttemptRef) errClass {
	am, cls := m.control(ref)
	if cls != clsOK {
		return cls
	}
	if am.a.RunState != kfstype.RunStateDispatchPending || am.o.Status != kfstype.OutboxStatusPending ||
		!am.o.AvailableAt.Equal(kfstype.Forever) {
		return clsInvalidTransition
	}
	am.o.AvailableAt = m.now
	am.o.UpdatedAt = m.now
	m.touch(am)
	return clsOK
}

// cancel is Cancel (state canceled, code CANCELED) and Supersede (state
// superseded, code SUPERSEDED).
func (m *model) cancel(ref *repo.AttemptRef, reason *string, state kfstype.RunState, code string) errClass {
	am, cls := m.control(ref)
	if cls != clsOK {
		return cls
	}
	if !am.a.Active {
		return clsInvalidTransition
	}
	m.end(am, state, kfstype.OutboxStatusCanceled)
	if reason != nil {
		am.a.LastErrorCode = sp(code)
		am.a.LastErrorMessage = sp(cut(*reason))
	}
	return clsOK
}

func (m *model) retryFailed(ref *repo.AttemptRef) errClass {
	am, cls := m.control(ref)
	if cls != clsOK {
		return cls
	}
	if am.a.RunState != kfstype.RunStateFailed {
		return clsInvalidTransition
	}
	if m.live(am.scope) != nil {
		return clsLiveAttemptExists
	}
	a, o := &am.a, &am.o
	a.RunState, a.Active, a.ExecutionAttempts = kfstype.RunStateDispatchPending, true, 0
	a.CompletedAt, a.StartedAt, a.LastErrorCode, a.LastErrorMessage = nil, nil, nil, nil
	m.clearLease(am)
	a.QueueJobID, a.ExternalJobID, a.RetryAt = nil, nil, nil
	m.touch(am)
	o.Status, o.DispatchAttempts, o.AvailableAt = kfstype.OutboxStatusPending, 0, m.now
	o.QueueJobID, o.ExternalJobID, o.DeliveredAt, o.LastError = nil, nil, nil, nil
	m.clearLock(am)
	return clsOK
}
