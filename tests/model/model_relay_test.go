package model_test

import (
	"bytes"
	"sort"

	"github.com/google/uuid"

	"github.com/knowledgefs/kfsdb/kfstype"
	"github.com/knowledgefs/kfsdb/repo"
)

// claim returns the rows ClaimOutbox takes, in claim order, and moves
// them to dispatching; the caller records each row's lock token.
func (m *model) claim(p *repo.ClaimOutboxParams) ([]*attemptModel, errClass) {
	if p.RelayID == "" || p.BatchSize < 1 || p.BatchSize > repo.MaxBatchSize || p.LockDuration < 0 {
		return nil, clsInvalidInput
	}
	var due []*attemptModel
	for _, am := range m.attempts {
		o := &am.o
		switch o.Status {
		case kfstype.OutboxStatusPending, kfstype.OutboxStatusDispatched, kfstype.OutboxStatusLeased:
			if !o.AvailableAt.After(m.now) {
				due = append(due, am)
			}
		case kfstype.OutboxStatusDispatching:
			if !o.LockedUntil.After(m.now) {
				due = append(due, am)
			}
		}
	}
	sort.Slice(due, func(i, j int) bool { return claimBefore(&due[i].o, &due[j].o) })
	if len(due) > int(p.BatchSize) {
		due = due[:p.BatchSize]
	}
	lock := p.LockDuration
	if lock == 0 {
		lock = repo.LockDurationDefault
	}
	for _, am := range due {
		o := &am.o
		o.Status = kfstype.OutboxStatusDispatching
		o.DispatchAttempts++
		o.LockedBy = sp(p.RelayID)
		o.LockToken = nil // learned from the result
		o.LockedUntil = tp(m.now.Add(lock))
		o.UpdatedAt = m.now
	}
	return due, clsOK
}

// claimBefore is the claim order: available_at, created_at, id.
func claimBefore(a, b *kfstype.OutboxMessage) bool {
	if !a.AvailableAt.Equal(b.AvailableAt) {
		return a.AvailableAt.Before(b.AvailableAt)
	}
	if !a.CreatedAt.Equal(b.CreatedAt) {
		return a.CreatedAt.Before(b.CreatedAt)
	}
	return bytes.Compare(a.ID[:], b.ID[:]) < 0
}

// markDispatched returns the outbox ids it marks, in input order.
func (m *model) markDispatched(p *repo.MarkDispatchedParams) ([]uuid.UUID, errClass) {
	if len(p.Dispatches) == 0 || len(p.Dispatches) > repo.MaxBatchSize || p.VisibilityTimeout < 0 {
		return nil, clsInvalidInput
	}
	seen := map[uuid.UUID]bool{}
	for _, d := range p.Dispatches {
		if d.OutboxID == uuid.Nil || d.LockToken == uuid.Nil || d.QueueJobID == "" ||
			(d.ExternalJobID != nil && *d.ExternalJobID == "") || seen[d.OutboxID] {
			return nil, clsInvalidInput
		}
		seen[d.OutboxID] = true
	}
	vis := p.VisibilityTimeout
	if vis == 0 {
		vis = repo.VisibilityTimeoutDefault
	}
	var marked []uuid.UUID
	for _, d := range p.Dispatches {
		am := m.findOutbox(d.OutboxID)
		if am == nil {
			continue
		}
		a, o := &am.a, &am.o
		waiting := a.RunState == kfstype.RunStateDispatchPending || a.RunState == kfstype.RunStateRetryWait ||
			a.RunState == kfstype.RunStateQueued ||
			(a.RunState == kfstype.RunStateRunning && !a.LeaseExpiresAt.After(m.now))
		if !waiting || o.Status != kfstype.OutboxStatusDispatching || *o.LockToken != d.LockToken {
			continue
		}
		a.QueueJobID, a.ExternalJobID = sp(d.QueueJobID), d.ExternalJobID
		if a.RunState != kfstype.RunStateRunning {
			a.RunState = kfstype.RunStateQueued
		}
		a.RetryAt = nil
		m.touch(am)
		o.Status = kfstype.OutboxStatusDispatched
		o.DeliveredAt = tp(m.now)
		o.QueueJobID, o.ExternalJobID = sp(d.QueueJobID), d.ExternalJobID
		m.clearLock(am)
		o.AvailableAt = m.now.Add(vis)
		am.jobs = append(am.jobs, d.QueueJobID)
		marked = append(marked, d.OutboxID)
	}
	return marked, clsOK
}

func (m *model) releaseOutbox(p *repo.ReleaseOutboxParams) errClass {
	if p.OutboxID == uuid.Nil || p.LockToken == uuid.Nil || p.Backoff <= 0 || p.MaxDispatchAttempts < 0 || p.LastError == "" {
		return clsInvalidInput
	}
	am := m.findOutbox(p.OutboxID)
	if am == nil || am.o.Status != kfstype.OutboxStatusDispatching || *am.o.LockToken != p.LockToken {
		return clsOutboxLockLost
	}
	maxAttempts := p.MaxDispatchAttempts
	if maxAttempts == 0 {
		maxAttempts = repo.MaxDispatchAttemptsDefault
	}
	msg := cut(p.LastError)
	a := &am.a
	leaseLive := a.RunState == kfstype.RunStateRunning && a.LeaseExpiresAt.After(m.now)
	switch {
	case am.o.DispatchAttempts >= maxAttempts && !leaseLive:
		// Only an attempt waiting for a delivery is dead-lettered.
		m.end(am, kfstype.RunStateFailed, kfstype.OutboxStatusDead)
		a.LastErrorCode, a.LastErrorMessage = sp(kfstype.ErrorCodeOutboxDead), sp(msg)
	case leaseLive:
		// The claim saw the lease expired, this release does not: the
		// row goes back to the lease, the attempt is untouched.
		am.o.Status = kfstype.OutboxStatusLeased
		am.o.AvailableAt = *a.LeaseExpiresAt
	default:
		am.o.Status = kfstype.OutboxStatusPending
		am.o.AvailableAt = m.now.Add(p.Backoff)
	}
	am.o.LastError = sp(msg)
	m.clearLock(am)
	return clsOK
}
