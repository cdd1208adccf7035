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

// drawDelivery is a queue message: the attempt's current job (mostly), an
// older one (stale), a forged one, or one for an unknown attempt.
func (s *seq) drawDelivery(t *rapid.T, prefer func(*attemptModel) bool) repo.Delivery {
	am := s.drawAttempt(t, prefer)
	d := repo.Delivery{AttemptID: am.a.ID, QueueJobID: "forged-" + s.nextJob()}
	switch v := pct(t, "job"); {
	case v < 75 && am.a.QueueJobID != nil:
		d.QueueJobID = *am.a.QueueJobID
	case v < 88 && len(am.jobs) > 0:
		d.QueueJobID = am.jobs[uniform(t, "oldJob", len(am.jobs))]
	case v >= 95:
		d.AttemptID = uuid.New()
	}
	switch v := pct(t, "externalJob"); {
	case v < 50 && am.a.ExternalJobID != nil:
		d.ExternalJobID = am.a.ExternalJobID
	case v < 60:
		d.ExternalJobID = sp("ext-forged")
	}
	if pct(t, "invalid") < 3 {
		d.QueueJobID = ""
	}
	return d
}

func (s *seq) AcquireLease(t *rapid.T) {
	p := &repo.AcquireLeaseParams{
		Delivery: s.drawDelivery(t, func(am *attemptModel) bool {
			return am.a.Active && am.a.QueueJobID != nil
		}),
		WorkerID:      draw(t, "worker", "worker-a", "worker-b"),
		LeaseDuration: draw(t, "lease", time.Duration(0), 10*time.Second, 30*time.Second),
	}
	s.acquire(t, p)
}

func (s *seq) acquire(t *rapid.T, p *repo.AcquireLeaseParams) {
	am, want := s.m.acquireLease(p)
	got, lease, err := s.repo.AcquireLease(s.ctx, s.h.pool, p)
	s.expect(t, "AcquireLease", want, err)
	if want == clsAttemptsExhausted && pct(t, "failExhausted") < 70 {
		// What the worker runtime does next.
		s.check(t)
		s.failExhausted(t, &p.Delivery)
	}
	if want != clsOK {
		return
	}
	require.NotNil(s.tb, lease)
	am.a.LeaseToken = &lease.Token
	am.leases = append(am.leases, *lease)
	require.Equal(s.tb, repo.Lease{AttemptID: am.a.ID, WorkerID: p.WorkerID, Token: lease.Token, ExpiresAt: *am.a.LeaseExpiresAt}, *lease)
	s.requireAttempt("AcquireLease", got, am)
}

func (s *seq) FailExhausted(t *rapid.T) {
	d := s.drawDelivery(t, func(am *attemptModel) bool {
		return am.a.Active && am.a.QueueJobID != nil && am.a.ExecutionAttempts >= am.a.MaxExecutionAttempts &&
			(am.a.RunState != kfstype.RunStateRunning || !am.a.LeaseExpiresAt.After(s.m.now))
	})
	s.failExhausted(t, &d)
}

func (s *seq) failExhausted(t *rapid.T, d *repo.Delivery) {
	want := s.m.failExhausted(d)
	got, err := s.repo.FailExhausted(s.ctx, s.h.pool, &repo.FailExhaustedParams{Delivery: *d})
	s.expect(t, "FailExhausted", want, err)
	if want == clsOK {
		s.requireAttempt("FailExhausted", got, s.m.find(d.AttemptID))
	}
}

// drawLease is a worker's lease: the current one of a running attempt
// (mostly), any lease ever handed out (a stale worker), the current one
// under another worker's name, or a forged token.
func (s *seq) drawLease(t *rapid.T) *repo.Lease {
	var current, all []repo.Lease
	for _, am := range s.m.attempts {
		all = append(all, am.leases...)
		if am.a.RunState == kfstype.RunStateRunning {
			current = append(current, am.leases[len(am.leases)-1])
		}
	}
	var l repo.Lease
	switch v := pct(t, "lease"); {
	case v < 75 && len(current) > 0:
		l = current[uniform(t, "current", len(current))]
	case v < 90 && len(all) > 0:
		l = all[uniform(t, "stale", len(all))]
	case v < 94 && len(current) > 0:
		l = current[uniform(t, "impostor", len(current))]
		l.WorkerID = "worker-impostor"
	case v < 97:
		am := s.drawAttempt(t, nil)
		l = repo.Lease{AttemptID: am.a.ID, WorkerID: "worker-a", Token: uuid.New()}
	default:
		l = repo.Lease{AttemptID: uuid.New(), WorkerID: "worker-a", Token: uuid.New()}
	}
	if pct(t, "invalidLease") < 2 {
		return nil
	}
	return &l
}

func (s *seq) Heartbeat(t *rapid.T) {
	s.heartbeat(t, &repo.HeartbeatParams{Lease: s.drawLease(t), LeaseDuration: draw(t, "lease", time.Duration(0), 10*time.Second, 30*time.Second)})
}

func (s *seq) heartbeat(t *rapid.T, p *repo.HeartbeatParams) {
	want := s.m.heartbeat(p)
	got, err := s.repo.Heartbeat(s.ctx, s.h.pool, p)
	s.expect(t, "Heartbeat", want, err)
	if want == clsOK {
		am := s.m.find(p.Lease.AttemptID)
		require.Equal(s.tb, am.leases[len(am.leases)-1], *got, "Heartbeat's renewed lease")
	}
}

// leaseTarget is the attempt a drawn lease names, if the sequence has it,
// and its checkpoint's rank (0 otherwise).
func (s *seq) leaseTarget(l *repo.Lease) (*attemptModel, int) {
	if l == nil {
		return nil, 0
	}
	am := s.m.find(l.AttemptID)
	if am == nil {
		return nil, 0
	}
	return am, am.a.Checkpoint.Rank()
}

// drawCandidate picks the candidate publication a lease holder's write
// gives: none (mostly), the attempt's own space's candidate (which for
// scope 0 may or may not be the one bound), another space's, a
// non-candidate, a wrong fingerprint, a malformed fingerprint or an id
// without fingerprint. likely makes giving one (mostly its own) the
// common case, for writes that need a candidate and have none bound.
func (s *seq) drawCandidate(t *rapid.T, am *attemptModel, likely bool) (*uuid.UUID, *string) {
	scope := 0
	if am != nil {
		scope = am.scope
	}
	own := s.cands[scope][uniform(t, "candidate", len(s.cands[scope]))]
	// Cumulative thresholds (percent) of own candidate, another space's,
	// a non-candidate, a wrong fingerprint, a malformed fingerprint and an
	// id without fingerprint; the rest binds nothing.
	th := [6]int{5, 8, 10, 12, 13, 14}
	if likely {
		th = [6]int{75, 82, 87, 92, 94, 95}
	}
	given := func(c testfactory.Candidate) (*uuid.UUID, *string) { return &c.ID, &c.Fingerprint }
	switch v := pct(t, "bind"); {
	case v < th[0]:
		return given(own)
	case v < th[1]:
		return given(s.cands[1-scope][0]) // another tenant's space
	case v < th[2]:
		return given(s.other) // not a candidate
	case v < th[3]:
		return given(testfactory.Candidate{ID: own.ID, Fingerprint: testfactory.Fingerprint("wrong")})
	case v < th[4]:
		return given(testfactory.Candidate{ID: own.ID, Fingerprint: "projection-set-sha256:XYZ"}) // invalid
	case v < th[5]:
		return &own.ID, nil // invalid: id without fingerprint
	}
	return nil, nil
}

func (s *seq) Advance(t *rapid.T) {
	l := s.drawLease(t)
	am, cur := s.leaseTarget(l)
	target := cur + 1
	switch v := pct(t, "step"); {
	case v < 10:
		target = cur
	case v < 15:
		target = cur + 2
	case v < 19:
		target = cur - 1
	}
	target = max(0, min(target, kfstype.CheckpointSmokeEvalPassed.Rank()))
	if pct(t, "published") < 2 {
		target = kfstype.CheckpointPublished.Rank() // invalid: only Complete publishes
	}
	p := &repo.AdvanceParams{Lease: l, Checkpoint: kfstype.Checkpoints()[target]}
	// Binding is likely at the step to projection_built and rare elsewhere.
	likely := am != nil && am.a.CandidatePublicationID == nil && p.Checkpoint == kfstype.CheckpointProjectionBuilt
	p.CandidatePublicationID, p.CandidateFingerprint = s.drawCandidate(t, am, likely)
	s.advance(t, p)
}

func (s *seq) advance(t *rapid.T, p *repo.AdvanceParams) {
	want := s.m.advance(p, false)
	got, err := s.repo.Advance(s.ctx, s.h.pool, p)
	s.expect(t, "Advance", want, err)
	if want == clsOK {
		s.requireAttempt("Advance", got, s.m.find(p.Lease.AttemptID))
	}
}

// AdvanceTo draws a target checkpoint anywhere from the current one to
// smoke_eval_passed (mostly forward, often several steps), sometimes
// behind it (refused) or published (invalid).
func (s *seq) AdvanceTo(t *rapid.T) {
	l := s.drawLease(t)
	am, cur := s.leaseTarget(l)
	last := kfstype.CheckpointSmokeEvalPassed.Rank()
	target := cur + 1 + uniform(t, "steps", max(1, last-cur))
	switch v := pct(t, "step"); {
	case v < 10:
		target = cur
	case v < 25:
		target = last
	case v < 33:
		target = cur - 1 - uniform(t, "back", max(1, cur))
	}
	target = max(0, min(target, last))
	if pct(t, "published") < 2 {
		target = kfstype.CheckpointPublished.Rank() // invalid: only Complete publishes
	}
	p := &repo.AdvanceParams{Lease: l, Checkpoint: kfstype.Checkpoints()[target]}
	// Binding is likely when the walk reaches projection_built or later
	// with none bound, and rare otherwise.
	likely := am != nil && am.a.CandidatePublicationID == nil && p.Checkpoint.NeedsCandidate()
	p.CandidatePublicationID, p.CandidateFingerprint = s.drawCandidate(t, am, likely)
	s.advanceTo(t, p)
}

func (s *seq) advanceTo(t *rapid.T, p *repo.AdvanceParams) {
	want := s.m.advance(p, true)
	got, err := s.repo.AdvanceTo(s.ctx, s.h.pool, (*repo.AdvanceToParams)(p))
	s.expect(t, "AdvanceTo", want, err)
	if want == clsOK {
		s.requireAttempt("AdvanceTo", got, s.m.find(p.Lease.AttemptID))
	}
}

func (s *seq) Complete(t *rapid.T) { s.complete(t, s.drawLease(t)) }

func (s *seq) complete(t *rapid.T, l *repo.Lease) {
	want := s.m.complete(l)
	got, err := s.repo.Complete(s.ctx, s.h.pool, &repo.CompleteParams{Lease: l})
	s.expect(t, "Complete", want, err)
	if want == clsOK {
		s.requireAttempt("Complete", got, s.m.find(l.AttemptID))
	}
}

func (s *seq) CompleteThrough(t *rapid.T) {
	l := s.drawLease(t)
	am, _ := s.leaseTarget(l)
	p := &repo.CompleteThroughParams{Lease: l}
	// Giving a candidate is likely when none is bound, rare otherwise.
	likely := am != nil && am.a.CandidatePublicationID == nil
	p.CandidatePublicationID, p.CandidateFingerprint = s.drawCandidate(t, am, likely)
	s.completeThrough(t, p)
}

func (s *seq) completeThrough(t *rapid.T, p *repo.CompleteThroughParams) {
	want := s.m.completeThrough(p)
	got, err := s.repo.CompleteThrough(s.ctx, s.h.pool, p)
	s.expect(t, "CompleteThrough", want, err)
	if want == clsOK {
		s.requireAttempt("CompleteThrough", got, s.m.find(p.Lease.AttemptID))
	}
}

func (s *seq) drawError(t *rapid.T, code string) (string, string) {
	msg := "compilation broke"
	if pct(t, "longMessage") < 5 {
		msg = strings.Repeat("ü", repo.MaxErrorMessageRunes+1)
	}
	switch v := pct(t, "invalidError"); {
	case v < 2:
		code = strings.Repeat("C", repo.MaxErrorCodeLength+1)
	case v < 4:
		msg = ""
	}
	return code, msg
}

func (s *seq) Fail(t *rapid.T) {
	p := &repo.FailParams{Lease: s.drawLease(t)}
	p.ErrorCode, p.ErrorMessage = s.drawError(t, kfstype.ErrorCodeCompilationFailed)
	want := s.m.fail(p)
	got, err := s.repo.Fail(s.ctx, s.h.pool, p)
	s.expect(t, "Fail", want, err)
	if want == clsOK {
		s.requireAttempt("Fail", got, s.m.find(p.Lease.AttemptID))
	}
}

func (s *seq) ScheduleRetry(t *rapid.T) {
	p := &repo.ScheduleRetryParams{Lease: s.drawLease(t), RetryDelay: draw(t, "retryDelay", time.Second, 10*time.Second, 45*time.Second)}
	p.ErrorCode, p.ErrorMessage = s.drawError(t, kfstype.ErrorCodeCompilationRetryable)
	if pct(t, "invalidDelay") < 2 {
		p.RetryDelay = 0
	}
	want := s.m.scheduleRetry(p)
	got, err := s.repo.ScheduleRetry(s.ctx, s.h.pool, p)
	s.expect(t, "ScheduleRetry", want, err)
	if want == clsOK {
		s.requireAttempt("ScheduleRetry", got, s.m.find(p.Lease.AttemptID))
	}
}
