package ops

import (
	"fmt"
	"sort"
	"time"

	"github.com/google/uuid"

	"github.com/knowledgefs/kfsdb/kfstype"
)

// AttemptView is an attempt as operators see it: every column but the
// lease token (LeaseHeld says whether one is held). Its JSON, with the
// column names of the seed, is the `--json` schema of `kfsdb attempts`.
type AttemptView struct {
	ID                      uuid.UUID          `json:"id"`
	TenantID                string             `json:"tenant_id"`
	KnowledgeSpaceID        uuid.UUID          `json:"knowledge_space_id"`
	DocumentAssetID         uuid.UUID          `json:"document_asset_id"`
	DocumentVersion         int32              `json:"document_version"`
	PublicationGenerationID uuid.UUID          `json:"publication_generation_id"`
	RunState                kfstype.RunState   `json:"run_state"`
	Checkpoint              kfstype.Checkpoint `json:"checkpoint"`
	ExecutionAttempts       int32              `json:"execution_attempts"`
	MaxExecutionAttempts    int32              `json:"max_execution_attempts"`
	CandidatePublicationID  *uuid.UUID         `json:"candidate_publication_id"`
	CandidateFingerprint    *string            `json:"candidate_fingerprint"`
	WorkerID                *string            `json:"worker_id"`
	LeaseHeld               bool               `json:"lease_held"`
	LeaseExpiresAt          *time.Time         `json:"lease_expires_at"`
	HeartbeatAt             *time.Time         `json:"heartbeat_at"`
	RetryAt                 *time.Time         `json:"retry_at"`
	QueueJobID              *string            `json:"queue_job_id"`
	LastErrorCode           *string            `json:"last_error_code"`
	LastErrorMessage        *string            `json:"last_error_message"`
	RowVersion              int32              `json:"row_version"`
	CreatedAt               time.Time          `json:"created_at"`
	StartedAt               *time.Time         `json:"started_at"`
	CompletedAt             *time.Time         `json:"completed_at"`
	UpdatedAt               time.Time          `json:"updated_at"`
	// Outbox is the attempt's outbox row, when it was read.
	Outbox *OutboxView `json:"outbox,omitempty"`
	// Timeline is set by `attempts show` and the attempt's page.
	Timeline []Event `json:"timeline,omitempty"`
}

// OutboxView is an outbox row as operators see it (no relay lock token).
type OutboxView struct {
	ID               uuid.UUID            `json:"id"`
	Status           kfstype.OutboxStatus `json:"status"`
	DispatchAttempts int32                `json:"dispatch_attempts"`
	AvailableAt      time.Time            `json:"available_at"`
	LockedBy         *string              `json:"locked_by"`
	LockedUntil      *time.Time           `json:"locked_until"`
	QueueJobID       *string              `json:"queue_job_id"`
	ExternalJobID    *string              `json:"external_job_id"`
	DeliveredAt      *time.Time           `json:"delivered_at"`
	LastError        *string              `json:"last_error"`
	CreatedAt        time.Time            `json:"created_at"`
	UpdatedAt        time.Time            `json:"updated_at"`
}

// ViewOf returns the view of a and, when o is not nil, its outbox row.
func ViewOf(a *kfstype.Attempt, o *kfstype.OutboxMessage) *AttemptView {
	v := &AttemptView{ID: a.ID, TenantID: a.TenantID, KnowledgeSpaceID: a.KnowledgeSpaceID, DocumentAssetID: a.DocumentAssetID,
		DocumentVersion: a.DocumentVersion, PublicationGenerationID: a.PublicationGenerationID, RunState: a.RunState,
		Checkpoint: a.Checkpoint, ExecutionAttempts: a.ExecutionAttempts, MaxExecutionAttempts: a.MaxExecutionAttempts,
		CandidatePublicationID: a.CandidatePublicationID, CandidateFingerprint: a.CandidateFingerprint, WorkerID: a.WorkerID,
		LeaseHeld: a.LeaseToken != nil, LeaseExpiresAt: a.LeaseExpiresAt, HeartbeatAt: a.HeartbeatAt, RetryAt: a.RetryAt,
		QueueJobID: a.QueueJobID, LastErrorCode: a.LastErrorCode, LastErrorMessage: a.LastErrorMessage, RowVersion: a.RowVersion,
		CreatedAt: a.CreatedAt, StartedAt: a.StartedAt, CompletedAt: a.CompletedAt, UpdatedAt: a.UpdatedAt}
	if o != nil {
		v.Outbox = &OutboxView{ID: o.ID, Status: o.Status, DispatchAttempts: o.DispatchAttempts, AvailableAt: o.AvailableAt,
			LockedBy: o.LockedBy, LockedUntil: o.LockedUntil, QueueJobID: o.QueueJobID, ExternalJobID: o.ExternalJobID,
			DeliveredAt: o.DeliveredAt, LastError: o.LastError, CreatedAt: o.CreatedAt, UpdatedAt: o.UpdatedAt}
	}
	return v
}

// Event is one point of an attempt's timeline.
type Event struct {
	At   time.Time `json:"at"`
	What string    `json:"what"`
}

// Timeline lists what the attempt's and its outbox row's timestamps say
// happened, oldest first. Times in the future (a retry, a lease's expiry)
// are included: they say what will happen.
func Timeline(a *kfstype.Attempt, o *kfstype.OutboxMessage) []Event {
	ev := []Event{{a.CreatedAt, "started (attempt and outbox row created)"}}
	add := func(t *time.Time, what string) {
		if t != nil {
			ev = append(ev, Event{*t, what})
		}
	}
	add(a.StartedAt, "first leased by a worker")
	add(a.HeartbeatAt, "last heartbeat")
	if a.RunState == kfstype.RunStateRunning {
		add(a.LeaseExpiresAt, "lease expires")
	}
	add(a.RetryAt, "retry due")
	if o != nil {
		add(o.DeliveredAt, fmt.Sprintf("last delivered (dispatch %d)", o.DispatchAttempts))
		if o.Status == kfstype.OutboxStatusDispatching {
			add(o.LockedUntil, "relay lock expires")
		}
		switch o.Status {
		case kfstype.OutboxStatusPending, kfstype.OutboxStatusDispatched, kfstype.OutboxStatusLeased:
			// The relay or a fetch takes the row again at available_at.
			ev = append(ev, Event{o.AvailableAt, fmt.Sprintf("outbox row (%s) due", o.Status)})
		}
	}
	add(a.CompletedAt, "ended "+string(a.RunState))
	ev = append(ev, Event{a.UpdatedAt, fmt.Sprintf("last written (row version %d)", a.RowVersion)})
	sort.SliceStable(ev, func(i, j int) bool { return ev[i].At.Before(ev[j].At) })
	return ev
}
