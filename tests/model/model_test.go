package model_test

import (
	"bytes"
	"fmt"
	"sort"
	"time"
	"unicode/utf8"

	"github.com/google/uuid"

	"github.com/knowledgefs/kfsdb/kfstype"
	"github.com/knowledgefs/kfsdb/repo"
)

// This file is the reference model: the spec's state machine in plain Go,
// with no database and nothing from package repo but its parameter types.
// Each method takes a call's parameters, predicts its error class and, when
// the call applies, moves the expected rows exactly as the spec (and the
// guards of db/queries) say. Values only the database picks (ids, lock and
// lease tokens) are learned from the call's result by the caller.

// pub is a projection set publication of the sequence.
type pub struct {
	scope  int
	fp     string
	status string
}

// attemptModel is one attempt and its outbox row as the model expects them
// to be stored, plus what the sequence's relay and workers remember about
// it (every lock token, job id and lease ever handed out).
type attemptModel struct {
	scope  int
	a      kfstype.Attempt
	o      kfstype.OutboxMessage
	tokens []uuid.UUID  // lock tokens of every claim, oldest first
	jobs   []string     // queue job ids of every MarkDispatched, oldest first
	leases []repo.Lease // every lease, oldest first; the last is current
}

// scopeRef is what the model needs to know of a testfactory.Scope.
type scopeRef struct {
	tenant  string
	space   uuid.UUID
	asset   uuid.UUID
	version int32
}

type model struct {
	now      time.Time
	scopes   [2]scopeRef
	heads    [2]int32
	pubs     map[uuid.UUID]pub
	attempts []*attemptModel
}

func tp(t time.Time) *time.Time { return &t }
func sp(s string) *string       { return &s }

// cut is the spec's message truncation (4,096 characters).
func cut(s string) string {
	if utf8.RuneCountInString(s) <= repo.MaxErrorMessageRunes {
		return s
	}
	return string([]rune(s)[:repo.MaxErrorMessageRunes])
}

func (m *model) find(id uuid.UUID) *attemptModel {
	for _, am := range m.attempts {
		if am.a.ID == id {
			return am
		}
	}
	return nil
}

func (m *model) findOutbox(id uuid.UUID) *attemptModel {
	for _, am := range m.attempts {
		if am.o.ID == id {
			return am
		}
	}
	return nil
}

// live is the document version's live attempt, if any.
func (m *model) live(scope int) *attemptModel {
	for _, am := range m.attempts {
		if am.scope == scope && am.a.Active {
			return am
		}
	}
	return nil
}

func (m *model) scopeOf(tenant string, space, asset uuid.UUID, version int32) int {
	for i, s := range m.scopes {
		if s.tenant == tenant && s.space == space && s.asset == asset && s.version == version {
			return i
		}
	}
	return -1
}

// touch is "every write bumps row_version".
func (m *model) touch(am *attemptModel) {
	am.a.RowVersion++
	am.a.UpdatedAt = m.now
}

func (m *model) clearLease(am *attemptModel) {
	am.a.WorkerID, am.a.LeaseToken, am.a.LeaseExpiresAt, am.a.HeartbeatAt = nil, nil, nil, nil
}

func (m *model) clearLock(am *attemptModel) {
	am.o.LockedBy, am.o.LockToken, am.o.LockedUntil = nil, nil, nil
	am.o.UpdatedAt = m.now
}

// end is the common part of every terminal transition.
func (m *model) end(am *attemptModel, state kfstype.RunState, status kfstype.OutboxStatus) {
	am.a.RunState = state
	am.a.Active = false
	am.a.CompletedAt = tp(m.now)
	m.clearLease(am)
	am.a.RetryAt = nil
	m.touch(am)
	am.o.Status = status
	m.clearLock(am)
}

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

// claim returns the rows ClaimOutbox takes, in claim order, and moves
// them to dispatching; the caller records each row's lock token.
func (m *model) claim(p *repo.ClaimParams) ([]*attemptModel, errClass) {
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
