package model_test

import (
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"
	"pgregory.net/rapid"

	"github.com/knowledgefs/kfsdb/kfstype"
	"github.com/knowledgefs/kfsdb/repo"
	"github.com/knowledgefs/kfsdb/tests/testfactory"
)

func (s *seq) Start(t *rapid.T) {
	s.start(t, uniform(t, "scope", 2), true)
}

// start starts an attempt for a scope; variants adds deferred and delayed
// starts and refused ones (stale head, another tenant, bad input).
func (s *seq) start(t *rapid.T, scope int, variants bool) {
	sc := s.scopes[scope]
	p := sc.StartParams()
	p.BaseHeadRevision = s.m.heads[scope]
	p.MaxExecutionAttempts = draw(t, "maxAttempts", int32(0), 1, 1, 2, 3)
	p.Deferred = variants && pct(t, "deferred") < 30
	if variants && !p.Deferred && pct(t, "availableAt") < 20 {
		p.AvailableAt = tp(s.m.now.Add(time.Duration(uniform(t, "delay", 31)) * time.Second))
	}
	if variants {
		switch v := pct(t, "variant"); {
		case v < 10:
			p.BaseHeadRevision++ // stale head
		case v < 13:
			other := s.scopes[1-scope]
			p.TenantID, p.KnowledgeSpaceID = other.TenantID, other.KnowledgeSpaceID
		case v < 15:
			p.KnowledgeSpaceID = s.scopes[1-scope].KnowledgeSpaceID
		case v < 17:
			p.DocumentVersion += 5
		case v < 19:
			p.DocumentVersion = 0 // invalid
		case v < 20:
			p.Deferred, p.AvailableAt = true, tp(s.m.now) // invalid
		}
	}
	s.startWith(t, p)
}

func (s *seq) startWith(t *rapid.T, p *repo.StartParams) {
	existing, create, want := s.m.start(p)
	res, err := s.repo.Start(s.ctx, s.h.pool, p)
	s.expect(t, "Start", want, err)
	defer s.checkCount()
	if want != clsOK {
		return
	}
	require.Equal(s.tb, create, res.Created, "Start created")
	if !create {
		require.Equal(s.tb, existing.a.ID, res.Attempt.ID, "Start returned another live attempt")
		s.requireAttempt("Start", res.Attempt, existing)
		return
	}
	rows := testfactory.ReadRows(s.ctx, s.tb, s.h.pool, res.Attempt.ID)
	am := s.m.created(p, res.Attempt.ID, rows.Outbox.ID)
	s.requireAttempt("Start", res.Attempt, am)
}

// drawRef names an attempt for a control-plane call: mostly its own
// tenant and space, sometimes another's (not found), an unknown id, an
// expected row version (current or stale) or an invalid field.
func (s *seq) drawRef(t *rapid.T, prefer func(*attemptModel) bool) repo.AttemptRef {
	am := s.drawAttempt(t, prefer)
	ref := repo.AttemptRef{TenantID: am.a.TenantID, KnowledgeSpaceID: am.a.KnowledgeSpaceID, AttemptID: am.a.ID}
	other := s.scopes[1-am.scope]
	switch v := pct(t, "ref"); {
	case v < 5:
		ref.TenantID, ref.KnowledgeSpaceID = other.TenantID, other.KnowledgeSpaceID
	case v < 8:
		ref.KnowledgeSpaceID = other.KnowledgeSpaceID
	case v < 10:
		ref.AttemptID = uuid.New()
	case v < 12:
		ref.AttemptID = uuid.Nil // invalid
	}
	switch v := pct(t, "rowVersion"); {
	case v < 30:
		rv := am.a.RowVersion
		ref.ExpectedRowVersion = &rv
	case v < 42:
		rv := am.a.RowVersion + int32(1+uniform(t, "staleBy", 2))
		ref.ExpectedRowVersion = &rv
	case v < 44:
		rv := int32(-1) // invalid
		ref.ExpectedRowVersion = &rv
	}
	return ref
}

func isLive(am *attemptModel) bool   { return am.a.Active }
func isFailed(am *attemptModel) bool { return am.a.RunState == kfstype.RunStateFailed }
func isDeferred(am *attemptModel) bool {
	return am.a.RunState == kfstype.RunStateDispatchPending && am.o.AvailableAt.Equal(kfstype.Forever)
}

func (s *seq) ReleaseDeferred(t *rapid.T) {
	ref := s.drawRef(t, isDeferred)
	want := s.m.releaseDeferred(&ref)
	got, err := s.repo.ReleaseDeferred(s.ctx, s.h.pool, &repo.ReleaseDeferredParams{AttemptRef: ref})
	s.expect(t, "ReleaseDeferred", want, err)
	if want == clsOK {
		s.requireAttempt("ReleaseDeferred", got, s.m.find(ref.AttemptID))
	}
}

func (s *seq) drawReason(t *rapid.T) *string {
	switch v := pct(t, "reason"); {
	case v < 40:
		return sp("no longer needed")
	case v < 45:
		return sp(strings.Repeat("é", repo.MaxErrorMessageRunes+10)) // cut to 4,096
	}
	return nil
}

func (s *seq) Cancel(t *rapid.T) {
	p := &repo.CancelParams{AttemptRef: s.drawRef(t, isLive), Reason: s.drawReason(t)}
	want := s.m.cancel(&p.AttemptRef, p.Reason, kfstype.RunStateCanceled, kfstype.ErrorCodeCanceled)
	got, err := s.repo.Cancel(s.ctx, s.h.pool, p)
	s.expect(t, "Cancel", want, err)
	if want == clsOK {
		s.requireAttempt("Cancel", got, s.m.find(p.AttemptID))
	}
}

func (s *seq) Supersede(t *rapid.T) {
	p := &repo.SupersedeParams{AttemptRef: s.drawRef(t, isLive), Reason: s.drawReason(t)}
	want := s.m.cancel(&p.AttemptRef, p.Reason, kfstype.RunStateSuperseded, kfstype.ErrorCodeSuperseded)
	got, err := s.repo.Supersede(s.ctx, s.h.pool, p)
	s.expect(t, "Supersede", want, err)
	if want == clsOK {
		s.requireAttempt("Supersede", got, s.m.find(p.AttemptID))
	}
}

func (s *seq) RetryFailed(t *rapid.T) {
	ref := s.drawRef(t, isFailed)
	want := s.m.retryFailed(&ref)
	got, err := s.repo.RetryFailed(s.ctx, s.h.pool, &repo.RetryFailedParams{AttemptRef: ref})
	s.expect(t, "RetryFailed", want, err)
	if want == clsOK {
		s.requireAttempt("RetryFailed", got, s.m.find(ref.AttemptID))
	}
}

// SetHead publishes a new head for a scope's space (a fixture, not a
// transition), so that Starts with the old base head conflict.
func (s *seq) SetHead(t *rapid.T) {
	i := uniform(t, "scope", 2)
	s.m.heads[i]++
	s.scopes[i].SetHead(s.ctx, s.tb, s.h.pool, s.m.heads[i])
	s.h.stats.op("SetHead", clsOK)
}

// AdvanceClock moves the sequence's time: often a little, sometimes up to
// 90 s (past every lease, lock, visibility timeout and backoff in use).
func (s *seq) AdvanceClock(t *rapid.T) {
	ms := uniform(t, "ms", 5001)
	if pct(t, "long") < 50 {
		ms = uniform(t, "longMs", 90001)
	}
	s.m.now = s.clock.Advance(time.Duration(ms) * time.Millisecond)
	s.h.stats.op("AdvanceClock", clsOK)
}
