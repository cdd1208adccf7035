package model_test

import (
	"fmt"
	"unicode/utf8"

	"github.com/google/uuid"

	"github.com/knowledgefs/kfsdb/kfstype"
	"github.com/knowledgefs/kfsdb/repo"
)

func validDelivery(d *repo.Delivery) bool {
	return d.AttemptID != uuid.Nil && d.QueueJobID != "" && (d.ExternalJobID == nil || *d.ExternalJobID != "")
}

// deliveryMatches: the delivered ids equal both rows' ids.
func deliveryMatches(am *attemptModel, d *repo.Delivery) bool {
	eq := func(have, want *string) bool { return have != nil && want != nil && *have == *want }
	return eq(am.a.QueueJobID, &d.QueueJobID) && eq(am.o.QueueJobID, &d.QueueJobID) &&
		(d.ExternalJobID == nil || (eq(am.a.ExternalJobID, d.ExternalJobID) && eq(am.o.ExternalJobID, d.ExternalJobID)))
}

// refuseDelivery is why AcquireLease (exhausting false) or FailExhausted
// (true) refused a delivery of an existing attempt.
func (m *model) refuseDelivery(am *attemptModel, d *repo.Delivery, exhausting bool) errClass {
	a := &am.a
	switch {
	case !deliveryMatches(am, d):
		if am.o.Status == kfstype.OutboxStatusDispatching {
			return clsDeliveryPending
		}
		return clsDeliveryMismatch
	case a.RunState.Terminal():
		return clsInvalidTransition
	case a.RunState == kfstype.RunStateRunning && a.LeaseExpiresAt.After(m.now):
		return clsInvalidTransition
	case !exhausting && a.ExecutionAttempts >= a.MaxExecutionAttempts:
		return clsAttemptsExhausted
	}
	return clsInvalidTransition
}

// acquireLease moves the attempt to running; the caller records the lease
// (its token is the database's).
func (m *model) acquireLease(p *repo.AcquireLeaseParams) (*attemptModel, errClass) {
	if !validDelivery(&p.Delivery) || p.WorkerID == "" || p.LeaseDuration < 0 {
		return nil, clsInvalidInput
	}
	am := m.find(p.AttemptID)
	if am == nil {
		return nil, clsNotFound
	}
	a, o := &am.a, &am.o
	// A retry_wait attempt is not claimable: it has no job id to match
	// (ScheduleRetry cleared it; MarkDispatched records the next one and
	// makes it queued).
	claimable := a.RunState == kfstype.RunStateQueued ||
		(a.RunState == kfstype.RunStateRunning && !a.LeaseExpiresAt.After(m.now))
	if !deliveryMatches(am, &p.Delivery) || a.ExecutionAttempts >= a.MaxExecutionAttempts || !claimable {
		return nil, m.refuseDelivery(am, &p.Delivery, false)
	}
	d := p.LeaseDuration
	if d == 0 {
		d = repo.LeaseDurationDefault
	}
	o.Status = kfstype.OutboxStatusLeased
	o.AvailableAt = m.now.Add(d)
	m.clearLock(am)
	a.RunState = kfstype.RunStateRunning
	a.ExecutionAttempts++
	a.WorkerID = sp(p.WorkerID)
	a.LeaseToken = nil // learned from the result
	a.LeaseExpiresAt = tp(m.now.Add(d))
	a.HeartbeatAt = tp(m.now)
	if a.StartedAt == nil {
		a.StartedAt = tp(m.now)
	}
	a.RetryAt = nil
	m.touch(am)
	return am, clsOK
}

func (m *model) failExhausted(d *repo.Delivery) errClass {
	if !validDelivery(d) {
		return clsInvalidInput
	}
	am := m.find(d.AttemptID)
	if am == nil {
		return clsNotFound
	}
	a := &am.a
	if !deliveryMatches(am, d) || a.ExecutionAttempts < a.MaxExecutionAttempts || !a.Active ||
		(a.RunState == kfstype.RunStateRunning && a.LeaseExpiresAt.After(m.now)) {
		return m.refuseDelivery(am, d, true)
	}
	used, limit := a.ExecutionAttempts, a.MaxExecutionAttempts
	m.end(am, kfstype.RunStateFailed, kfstype.OutboxStatusDead)
	a.LastErrorCode = sp(kfstype.ErrorCodeExecutionAttemptsExhausted)
	a.LastErrorMessage = sp(fmt.Sprintf("execution attempts exhausted (%d of %d)", used, limit))
	return clsOK
}

func validLease(l *repo.Lease) bool {
	return l != nil && l.AttemptID != uuid.Nil && l.WorkerID != "" && l.Token != uuid.Nil
}

// lease checks a worker's lease: the attempt is running under this token
// and worker, the lease has not expired, and its outbox row is still
// leased (the relay has not reclaimed it).
func (m *model) lease(l *repo.Lease) (*attemptModel, errClass) {
	am := m.find(l.AttemptID)
	if am == nil {
		return nil, clsNotFound
	}
	a := &am.a
	if a.RunState != kfstype.RunStateRunning || *a.LeaseToken != l.Token || *a.WorkerID != l.WorkerID ||
		!a.LeaseExpiresAt.After(m.now) || am.o.Status != kfstype.OutboxStatusLeased {
		return nil, clsLeaseLost
	}
	return am, clsOK
}

func (m *model) heartbeat(p *repo.HeartbeatParams) errClass {
	if !validLease(p.Lease) || p.LeaseDuration < 0 {
		return clsInvalidInput
	}
	am, cls := m.lease(p.Lease)
	if cls != clsOK {
		return cls
	}
	d := p.LeaseDuration
	if d == 0 {
		d = repo.LeaseDurationDefault
	}
	am.o.AvailableAt = m.now.Add(d)
	am.o.UpdatedAt = m.now
	am.a.LeaseExpiresAt = tp(m.now.Add(d))
	am.a.HeartbeatAt = tp(m.now)
	m.touch(am)
	am.leases[len(am.leases)-1].ExpiresAt = m.now.Add(d)
	return clsOK
}

func validCandidate(id *uuid.UUID, fingerprint *string) bool {
	return (id == nil) == (fingerprint == nil) &&
		(id == nil || (*id != uuid.Nil && repo.ValidateFingerprint(*fingerprint) == nil))
}

// candidate checks a candidate publication given to a lease holder's
// write: it must be the bound one again or, when none is bound, a
// 'candidate' publication with that fingerprint in the attempt's own
// tenant and space. Nothing given is fine here; the caller checks whether
// its target needs a bound candidate.
func (m *model) candidate(am *attemptModel, id *uuid.UUID, fingerprint *string) errClass {
	if id == nil {
		return clsOK
	}
	a := &am.a
	pb, ok := m.pubs[*id]
	fresh := a.CandidatePublicationID == nil && ok && pb.scope == am.scope &&
		pb.fp == *fingerprint && pb.status == "candidate"
	same := a.CandidatePublicationID != nil && *a.CandidatePublicationID == *id &&
		*a.CandidateFingerprint == *fingerprint
	if !fresh && !same {
		return clsCandidateRejected
	}
	return clsOK
}

// bind records a candidate given to a write that applied (bound once).
func (m *model) bind(am *attemptModel, id *uuid.UUID, fingerprint *string) {
	if am.a.CandidatePublicationID == nil && id != nil {
		i, fp := *id, *fingerprint
		am.a.CandidatePublicationID, am.a.CandidateFingerprint = &i, &fp
	}
}

// advance is Advance (anyStep false: the checkpoint stays or moves one
// step) and AdvanceTo (anyStep true: it stays or moves forward any number
// of steps).
func (m *model) advance(p *repo.AdvanceParams, anyStep bool) errClass {
	switch {
	case !validLease(p.Lease), p.Checkpoint == kfstype.CheckpointPublished, p.Checkpoint.Rank() < 0,
		!validCandidate(p.CandidatePublicationID, p.CandidateFingerprint):
		return clsInvalidInput
	}
	am, cls := m.lease(p.Lease)
	if cls != clsOK {
		return cls
	}
	a := &am.a
	cur, want := a.Checkpoint.Rank(), p.Checkpoint.Rank()
	if want < cur || (!anyStep && want > cur+1) {
		return clsInvalidTransition
	}
	if cls := m.candidate(am, p.CandidatePublicationID, p.CandidateFingerprint); cls != clsOK {
		return cls
	}
	if p.Checkpoint.NeedsCandidate() && a.CandidatePublicationID == nil && p.CandidatePublicationID == nil {
		return clsCandidateRejected
	}
	a.Checkpoint = p.Checkpoint
	m.bind(am, p.CandidatePublicationID, p.CandidateFingerprint)
	m.touch(am)
	return clsOK
}

func (m *model) complete(l *repo.Lease) errClass {
	if !validLease(l) {
		return clsInvalidInput
	}
	am, cls := m.lease(l)
	if cls != clsOK {
		return cls
	}
	if am.a.Checkpoint != kfstype.CheckpointSmokeEvalPassed {
		return clsInvalidTransition
	}
	m.end(am, kfstype.RunStateSucceeded, kfstype.OutboxStatusCompleted)
	am.a.Checkpoint = kfstype.CheckpointPublished
	return clsOK
}

// completeThrough is AdvanceTo smoke_eval_passed then Complete in one
// step: from any checkpoint of a running attempt, with a candidate bound
// or given (the walk passes projection_built).
func (m *model) completeThrough(p *repo.CompleteThroughParams) errClass {
	if !validLease(p.Lease) || !validCandidate(p.CandidatePublicationID, p.CandidateFingerprint) {
		return clsInvalidInput
	}
	am, cls := m.lease(p.Lease)
	if cls != clsOK {
		return cls
	}
	if cls := m.candidate(am, p.CandidatePublicationID, p.CandidateFingerprint); cls != clsOK {
		return cls
	}
	if am.a.CandidatePublicationID == nil && p.CandidatePublicationID == nil {
		return clsCandidateRejected
	}
	m.bind(am, p.CandidatePublicationID, p.CandidateFingerprint)
	m.end(am, kfstype.RunStateSucceeded, kfstype.OutboxStatusCompleted)
	am.a.Checkpoint = kfstype.CheckpointPublished
	return clsOK
}

func validCode(code string) bool {
	return code != "" && utf8.RuneCountInString(code) <= repo.MaxErrorCodeLength
}

func (m *model) fail(p *repo.FailParams) errClass {
	if !validLease(p.Lease) || !validCode(p.ErrorCode) || p.ErrorMessage == "" {
		return clsInvalidInput
	}
	am, cls := m.lease(p.Lease)
	if cls != clsOK {
		return cls
	}
	m.end(am, kfstype.RunStateFailed, kfstype.OutboxStatusDead)
	am.a.LastErrorCode, am.a.LastErrorMessage = sp(p.ErrorCode), sp(cut(p.ErrorMessage))
	return clsOK
}

func (m *model) scheduleRetry(p *repo.ScheduleRetryParams) errClass {
	if !validLease(p.Lease) || p.RetryDelay <= 0 || !validCode(p.ErrorCode) || p.ErrorMessage == "" {
		return clsInvalidInput
	}
	am, cls := m.lease(p.Lease)
	if cls != clsOK {
		return cls
	}
	a, o := &am.a, &am.o
	if a.ExecutionAttempts >= a.MaxExecutionAttempts {
		return clsAttemptsExhausted
	}
	at := m.now.Add(p.RetryDelay)
	o.Status, o.AvailableAt, o.DispatchAttempts = kfstype.OutboxStatusPending, at, 0
	o.DeliveredAt, o.QueueJobID, o.ExternalJobID = nil, nil, nil
	m.clearLock(am)
	a.RunState, a.RetryAt = kfstype.RunStateRetryWait, tp(at)
	a.LastErrorCode, a.LastErrorMessage = sp(p.ErrorCode), sp(cut(p.ErrorMessage))
	m.clearLease(am)
	a.QueueJobID, a.ExternalJobID = nil, nil
	m.touch(am)
	return clsOK
}
