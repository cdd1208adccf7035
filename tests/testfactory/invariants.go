package testfactory

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/stretchr/testify/require"

	"github.com/knowledgefs/kfsdb/kfstype"
)

// outboxStatusesFor lists, per attempt run state, the outbox statuses the
// pair may show. The spec's table gives the steady pairs; the relay's
// redelivery cycle (claim, backoff, republish) adds dispatching, pending and
// dispatched to every live state it can republish.
var outboxStatusesFor = map[kfstype.RunState][]kfstype.OutboxStatus{
	kfstype.RunStateDispatchPending: {kfstype.OutboxStatusPending, kfstype.OutboxStatusDispatching},
	kfstype.RunStateQueued:          {kfstype.OutboxStatusDispatched, kfstype.OutboxStatusDispatching, kfstype.OutboxStatusPending},
	kfstype.RunStateRunning:         {kfstype.OutboxStatusLeased, kfstype.OutboxStatusDispatching, kfstype.OutboxStatusDispatched, kfstype.OutboxStatusPending},
	kfstype.RunStateRetryWait:       {kfstype.OutboxStatusPending, kfstype.OutboxStatusDispatching},
	kfstype.RunStateSucceeded:       {kfstype.OutboxStatusCompleted},
	kfstype.RunStateFailed:          {kfstype.OutboxStatusDead},
	kfstype.RunStateCanceled:        {kfstype.OutboxStatusCanceled},
	kfstype.RunStateSuperseded:      {kfstype.OutboxStatusCanceled},
}

// Rows is an attempt and its outbox row as stored.
type Rows struct {
	Attempt kfstype.Attempt
	Outbox  kfstype.OutboxMessage
}

// ReadRows reads an attempt and its outbox row with plain SQL (not through
// repo, so a repo bug cannot hide itself).
func ReadRows(ctx context.Context, t testing.TB, db DBTX, attemptID uuid.UUID) *Rows {
	t.Helper()
	var r Rows
	a, o := &r.Attempt, &r.Outbox
	var activeSlot *int32
	var availableAt pgtype.Timestamptz
	err := db.QueryRow(ctx, `
		SELECT a.id, a.tenant_id, a.knowledge_space_id, a.document_asset_id, a.document_version,
		       a.publication_generation_id, a.base_head_revision, a.candidate_publication_id,
		       a.candidate_fingerprint, a.checkpoint, a.run_state, a.active_slot, a.execution_attempts,
		       a.max_execution_attempts, a.queue_job_id, a.external_job_id, a.worker_id, a.lease_token,
		       a.lease_expires_at, a.heartbeat_at, a.retry_at, a.last_error_code, a.last_error_message,
		       a.row_version, a.created_at, a.updated_at, a.started_at, a.completed_at,
		       o.id, o.attempt_id, o.event_type, o.schema_version, o.payload, o.idempotency_key, o.status,
		       o.dispatch_attempts, o.available_at, o.locked_by, o.lock_token, o.locked_until,
		       o.queue_job_id, o.external_job_id, o.delivered_at, o.last_error, o.created_at, o.updated_at
		  FROM document_compilation_attempts a
		  JOIN document_compilation_outbox o ON o.attempt_id = a.id
		 WHERE a.id = $1`, attemptID).Scan(
		&a.ID, &a.TenantID, &a.KnowledgeSpaceID, &a.DocumentAssetID, &a.DocumentVersion,
		&a.PublicationGenerationID, &a.BaseHeadRevision, &a.CandidatePublicationID,
		&a.CandidateFingerprint, &a.Checkpoint, &a.RunState, &activeSlot, &a.ExecutionAttempts,
		&a.MaxExecutionAttempts, &a.QueueJobID, &a.ExternalJobID, &a.WorkerID, &a.LeaseToken,
		&a.LeaseExpiresAt, &a.HeartbeatAt, &a.RetryAt, &a.LastErrorCode, &a.LastErrorMessage,
		&a.RowVersion, &a.CreatedAt, &a.UpdatedAt, &a.StartedAt, &a.CompletedAt,
		&o.ID, &o.AttemptID, &o.EventType, &o.SchemaVersion, &o.Payload, &o.IdempotencyKey, &o.Status,
		&o.DispatchAttempts, &availableAt, &o.LockedBy, &o.LockToken, &o.LockedUntil,
		&o.QueueJobID, &o.ExternalJobID, &o.DeliveredAt, &o.LastError, &o.CreatedAt, &o.UpdatedAt)
	require.NoError(t, err, "read attempt %s with its outbox row", attemptID)
	a.Active = activeSlot != nil
	o.AvailableAt = availableAt.Time
	if availableAt.InfinityModifier == pgtype.Infinity {
		o.AvailableAt = kfstype.Forever
	}
	if activeSlot != nil {
		require.EqualValues(t, 1, *activeSlot)
	}
	utcAttempt(a)
	utcOutbox(o)
	return &r
}

// RequireInvariants reads the attempt and its outbox row and checks every
// invariant of the seed schema and the spec: the status pairing, the
// outbox's fixed fields, the lifecycle, lease, retry and candidate rules.
// It returns the rows.
func RequireInvariants(ctx context.Context, t testing.TB, db DBTX, attemptID uuid.UUID) *Rows {
	t.Helper()
	r := ReadRows(ctx, t, db, attemptID)
	CheckInvariants(t, r)
	return r
}

// CheckInvariants checks rows already read.
func CheckInvariants(t testing.TB, r *Rows) {
	t.Helper()
	a, o := &r.Attempt, &r.Outbox

	// Outbox: one fixed event per attempt.
	require.Equal(t, a.ID, o.AttemptID)
	require.Equal(t, kfstype.EventTypeDocumentCompile, o.EventType)
	require.EqualValues(t, kfstype.EventSchemaVersion, o.SchemaVersion)
	require.Equal(t, "document.compile:"+a.ID.String(), o.IdempotencyKey)
	var payload map[string]any
	require.NoError(t, json.Unmarshal(o.Payload, &payload))
	require.Equal(t, map[string]any{"attemptId": a.ID.String()}, payload)
	require.GreaterOrEqual(t, o.DispatchAttempts, int32(0))
	if o.Status == kfstype.OutboxStatusDispatching {
		require.NotNil(t, o.LockedBy)
		require.NotNil(t, o.LockToken)
		require.NotNil(t, o.LockedUntil)
		require.NotEqual(t, uuid.Nil, *o.LockToken)
	} else {
		require.Nil(t, o.LockedBy, "lock columns set while %s", o.Status)
		require.Nil(t, o.LockToken)
		require.Nil(t, o.LockedUntil)
	}

	// Pairing.
	require.Contains(t, outboxStatusesFor[a.RunState], o.Status, "attempt %s with outbox %s", a.RunState, o.Status)

	// Lifecycle.
	require.Equal(t, a.RunState.Live(), a.Active, "active slot vs %s", a.RunState)
	require.Equal(t, a.RunState.Terminal(), a.CompletedAt != nil, "completed_at vs %s", a.RunState)
	require.GreaterOrEqual(t, a.RowVersion, int32(0))
	require.False(t, a.UpdatedAt.Before(a.CreatedAt), "updated_at before created_at")
	require.True(t, a.ExecutionAttempts >= 0 && a.ExecutionAttempts <= a.MaxExecutionAttempts && a.MaxExecutionAttempts > 0)
	require.NotEqual(t, -1, a.Checkpoint.Rank(), "unknown checkpoint %q", a.Checkpoint)
	require.Equal(t, a.RunState == kfstype.RunStateSucceeded, a.Checkpoint == kfstype.CheckpointPublished,
		"checkpoint published iff succeeded (run_state %s, checkpoint %s)", a.RunState, a.Checkpoint)
	if a.RunState == kfstype.RunStateFailed {
		require.NotNil(t, a.LastErrorCode, "failed without an error code")
	}

	// Lease.
	running := a.RunState == kfstype.RunStateRunning
	require.Equal(t, running, a.WorkerID != nil)
	require.Equal(t, running, a.LeaseToken != nil)
	require.Equal(t, running, a.LeaseExpiresAt != nil)
	require.Equal(t, running, a.HeartbeatAt != nil)
	if running {
		require.NotEqual(t, uuid.Nil, *a.LeaseToken)
		require.NotNil(t, a.StartedAt)
		require.GreaterOrEqual(t, a.ExecutionAttempts, int32(1))
		if o.Status == kfstype.OutboxStatusLeased {
			require.True(t, o.AvailableAt.Equal(*a.LeaseExpiresAt), "leased outbox due at %s, lease expires %s", o.AvailableAt, *a.LeaseExpiresAt)
		} else {
			// Only the relay takes a running attempt's row from leased
			// (ClaimOutbox, at the lease's expiry), and every later
			// change of the row (MarkDispatched, ReleaseOutbox) comes
			// after that; no worker call renews a lease whose row is not
			// leased. So the lease expired no later than the row's last
			// change.
			require.False(t, a.LeaseExpiresAt.After(o.UpdatedAt),
				"running with outbox %s: lease expires %s, after the row's last change at %s", o.Status, *a.LeaseExpiresAt, o.UpdatedAt)
		}
	}

	// Retry. ScheduleRetry makes the outbox row due exactly at retry_at;
	// if publishing it then fails, ReleaseOutbox backs it off past
	// retry_at (the attempt is untouched). Either way the relay never
	// republishes a retry before retry_at.
	require.Equal(t, a.RunState == kfstype.RunStateRetryWait, a.RetryAt != nil)
	if a.RunState == kfstype.RunStateRetryWait && o.Status == kfstype.OutboxStatusPending {
		require.False(t, o.AvailableAt.Before(*a.RetryAt), "retry outbox due at %s, before retry_at %s", o.AvailableAt, *a.RetryAt)
	}

	// Candidate.
	require.Equal(t, a.CandidatePublicationID == nil, a.CandidateFingerprint == nil)
	if a.Checkpoint.NeedsCandidate() {
		require.NotNil(t, a.CandidatePublicationID, "checkpoint %s without a candidate", a.Checkpoint)
	}

	// Job ids: a dispatched or leased row carries the attempt's ids.
	if o.Status == kfstype.OutboxStatusDispatched || o.Status == kfstype.OutboxStatusLeased {
		require.NotNil(t, o.QueueJobID)
		require.Equal(t, o.QueueJobID, a.QueueJobID)
		require.Equal(t, o.ExternalJobID, a.ExternalJobID)
		require.NotNil(t, o.DeliveredAt)
	}
}

func utcAttempt(a *kfstype.Attempt) {
	a.CreatedAt, a.UpdatedAt = a.CreatedAt.UTC(), a.UpdatedAt.UTC()
	for _, p := range []**time.Time{&a.LeaseExpiresAt, &a.HeartbeatAt, &a.RetryAt, &a.StartedAt, &a.CompletedAt} {
		if *p != nil {
			u := (**p).UTC()
			*p = &u
		}
	}
}

func utcOutbox(o *kfstype.OutboxMessage) {
	o.AvailableAt, o.CreatedAt, o.UpdatedAt = o.AvailableAt.UTC(), o.CreatedAt.UTC(), o.UpdatedAt.UTC()
	for _, p := range []**time.Time{&o.LockedUntil, &o.DeliveredAt} {
		if *p != nil {
			u := (**p).UTC()
			*p = &u
		}
	}
}
