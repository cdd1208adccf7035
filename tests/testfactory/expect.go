package testfactory

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/knowledgefs/kfsdb/kfstype"
	"github.com/knowledgefs/kfsdb/repo"
)

// The Expect functions build the rows a test expects after one transition
// at now: each takes the rows before it (or, for ExpectStarted, the rows
// Start wrote, for their generated ids) and returns a changed copy.

// ExpectBackedOff is before with the claimed outbox row released for a
// retry after backoff.
func ExpectBackedOff(before *Rows, msg string, now time.Time, backoff time.Duration) *Rows {
	want := *before
	want.Outbox.Status = kfstype.OutboxStatusPending
	want.Outbox.AvailableAt = now.Add(backoff)
	want.Outbox.LastError = new(msg)
	unlock(&want.Outbox, now)
	return &want
}

// ExpectClaimed is before with the outbox row claimed as m by relayID,
// locked for lock.
func ExpectClaimed(before *Rows, m *kfstype.OutboxMessage, relayID string, now time.Time, lock time.Duration) *Rows {
	want := *before
	want.Outbox.Status = kfstype.OutboxStatusDispatching
	want.Outbox.DispatchAttempts++
	want.Outbox.LockedBy = new(relayID)
	want.Outbox.LockToken = m.LockToken
	want.Outbox.LockedUntil = new(now.Add(lock))
	want.Outbox.UpdatedAt = now
	return &want
}

// ExpectControlEnded is before after Cancel or Supersede: the attempt
// ended in state (with code and reason as its last error when a reason is
// given) and its outbox row canceled.
func ExpectControlEnded(before *Rows, state kfstype.RunState, code string, reason *string, now time.Time) *Rows {
	want := *before
	end(&want.Attempt, state, now)
	if reason != nil {
		want.Attempt.LastErrorCode, want.Attempt.LastErrorMessage = &code, reason
	}
	want.Outbox.Status = kfstype.OutboxStatusCanceled
	unlock(&want.Outbox, now)
	return &want
}

// ExpectDeadLettered is before with the outbox row dead after msg and the
// attempt failed with OUTBOX_DEAD.
func ExpectDeadLettered(before *Rows, msg string, now time.Time) *Rows {
	want := *before
	want.Outbox.Status = kfstype.OutboxStatusDead
	want.Outbox.LastError = new(msg)
	unlock(&want.Outbox, now)
	end(&want.Attempt, kfstype.RunStateFailed, now)
	want.Attempt.LastErrorCode = new(kfstype.ErrorCodeOutboxDead)
	want.Attempt.LastErrorMessage = new(msg)
	return &want
}

// ExpectEnded is before with the attempt ended in state (terminal columns
// set, lease cleared) and its outbox row in status.
func ExpectEnded(before *Rows, state kfstype.RunState, status kfstype.OutboxStatus, now time.Time) *Rows {
	want := *before
	end(&want.Attempt, state, now)
	want.Outbox.Status = status
	unlock(&want.Outbox, now)
	return &want
}

// ExpectLeased is before with the attempt leased as lease for d.
func ExpectLeased(before *Rows, lease *repo.Lease, now time.Time, d time.Duration) *Rows {
	want := *before
	a := &want.Attempt
	a.RunState = kfstype.RunStateRunning
	a.ExecutionAttempts++
	a.WorkerID = new(lease.WorkerID)
	a.LeaseToken = new(lease.Token)
	a.LeaseExpiresAt = new(now.Add(d))
	a.HeartbeatAt = new(now)
	if a.StartedAt == nil {
		a.StartedAt = new(now)
	}
	a.RetryAt = nil
	touch(a, now)
	want.Outbox.Status = kfstype.OutboxStatusLeased
	want.Outbox.AvailableAt = now.Add(d)
	unlock(&want.Outbox, now)
	return &want
}

// ExpectMarked is before with the claimed outbox row marked dispatched as
// job (and ext) and the attempt queued (or still running) with the job
// ids, the row visible again after visibility.
func ExpectMarked(before *Rows, job string, ext *string, now time.Time, visibility time.Duration) *Rows {
	want := *before
	want.Outbox.Status = kfstype.OutboxStatusDispatched
	want.Outbox.DeliveredAt = new(now)
	want.Outbox.QueueJobID = new(job)
	want.Outbox.ExternalJobID = ext
	want.Outbox.AvailableAt = now.Add(visibility)
	unlock(&want.Outbox, now)
	if want.Attempt.RunState != kfstype.RunStateRunning {
		want.Attempt.RunState = kfstype.RunStateQueued
	}
	want.Attempt.QueueJobID = new(job)
	want.Attempt.ExternalJobID = ext
	want.Attempt.RetryAt = nil
	touch(&want.Attempt, now)
	return &want
}

// ExpectStarted is the rows Start must write for p at now (the ids taken
// from got), with maxAttempts executions and the outbox row due at
// availableAt.
func ExpectStarted(got *Rows, p *repo.StartParams, maxAttempts int32, now, availableAt time.Time) *Rows {
	id := got.Attempt.ID
	return &Rows{
		Attempt: kfstype.Attempt{
			ID:                      id,
			TenantID:                p.TenantID,
			KnowledgeSpaceID:        p.KnowledgeSpaceID,
			DocumentAssetID:         p.DocumentAssetID,
			DocumentVersion:         p.DocumentVersion,
			PublicationGenerationID: p.PublicationGenerationID,
			BaseHeadRevision:        p.BaseHeadRevision,
			Checkpoint:              kfstype.CheckpointQueued,
			RunState:                kfstype.RunStateDispatchPending,
			Active:                  true,
			ExecutionAttempts:       0,
			MaxExecutionAttempts:    maxAttempts,
			RowVersion:              0,
			CreatedAt:               now,
			UpdatedAt:               now,
		},
		Outbox: kfstype.OutboxMessage{
			ID:               got.Outbox.ID,
			AttemptID:        id,
			EventType:        "document.compile",
			SchemaVersion:    1,
			Payload:          json.RawMessage(`{"attemptId": "` + id.String() + `"}`),
			IdempotencyKey:   "document.compile:" + id.String(),
			Status:           kfstype.OutboxStatusPending,
			DispatchAttempts: 0,
			AvailableAt:      availableAt,
			CreatedAt:        now,
			UpdatedAt:        now,
		},
	}
}

// end sets the attempt's terminal columns for state at now and clears its
// lease and retry.
func end(a *kfstype.Attempt, state kfstype.RunState, now time.Time) {
	a.RunState = state
	a.Active = false
	a.CompletedAt = new(now)
	a.WorkerID, a.LeaseToken, a.LeaseExpiresAt, a.HeartbeatAt = nil, nil, nil, nil
	a.RetryAt = nil
	touch(a, now)
}

// touch records a change of the attempt row at now.
func touch(a *kfstype.Attempt, now time.Time) {
	a.RowVersion++
	a.UpdatedAt = now
}

// unlock clears the outbox row's relay lock, changed at now.
func unlock(o *kfstype.OutboxMessage, now time.Time) {
	o.LockedBy, o.LockToken, o.LockedUntil = nil, nil, nil
	o.UpdatedAt = now
}

// ExpectFetched is before with the pair leased by FetchLeases: as
// ExpectLeased, and the outbox row counted as one more dispatch, delivered
// now under the fetch's deterministic job id, which both rows carry.
func ExpectFetched(before *Rows, lease *repo.Lease, now time.Time, d time.Duration) *Rows {
	want := ExpectLeased(before, lease, now, d)
	want.Outbox.DispatchAttempts++
	job := fmt.Sprintf("pg:%s:%d:%d", before.Outbox.ID, want.Outbox.DispatchAttempts, want.Attempt.RowVersion)
	want.Outbox.QueueJobID, want.Attempt.QueueJobID = new(job), new(job)
	want.Outbox.ExternalJobID, want.Attempt.ExternalJobID = nil, nil
	want.Outbox.DeliveredAt = new(now)
	return want
}
