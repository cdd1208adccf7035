package model_test

import (
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"
	"pgregory.net/rapid"

	"github.com/knowledgefs/kfsdb/kfstype"
	"github.com/knowledgefs/kfsdb/repo"
	"github.com/knowledgefs/kfsdb/tests/testfactory"
)

func (s *seq) ClaimOutbox(t *rapid.T) {
	p := &repo.ClaimOutboxParams{
		RelayID:      draw(t, "relay", "relay-a", "relay-b"),
		BatchSize:    int32(1 + uniform(t, "batch", 3)),
		LockDuration: draw(t, "lock", time.Duration(0), 5*time.Second, 20*time.Second),
	}
	if pct(t, "invalid") < 3 {
		p.BatchSize = draw(t, "badBatch", int32(0), repo.MaxBatchSize+1)
	}
	s.claim(t, p)
}

func (s *seq) claim(t *rapid.T, p *repo.ClaimOutboxParams) {
	want, cls := s.m.claim(p)
	got, err := s.repo.ClaimOutbox(s.ctx, s.h.pool, p)
	s.expect(t, "ClaimOutbox", cls, err)
	if cls != clsOK {
		return
	}
	gotIDs := make([]uuid.UUID, len(got))
	for i, o := range got {
		gotIDs[i] = o.ID
		if s.m.findOutbox(o.ID) == nil {
			t.Fatalf("ClaimOutbox claimed outbox row %s of attempt %s, which is not this sequence's", o.ID, o.AttemptID)
		}
	}
	wantIDs := make([]uuid.UUID, len(want))
	for i, am := range want {
		wantIDs[i] = am.o.ID
	}
	require.Equal(s.tb, wantIDs, gotIDs, "ClaimOutbox rows (in claim order)")
	for i, am := range want {
		require.NotNil(s.tb, got[i].LockToken)
		am.o.LockToken = got[i].LockToken
		am.tokens = append(am.tokens, *got[i].LockToken)
		s.requireOutbox("ClaimOutbox", got[i], am)
	}
	s.h.stats.rows("ClaimOutbox rows", len(want), 0)
}

// RelayCycle is what the relay does: claim a batch, then record each
// claimed row as published (MarkDispatched, one batch) or failed
// (ReleaseOutbox, one call per row), each call checked on its own.
func (s *seq) RelayCycle(t *rapid.T) {
	relay := draw(t, "relay", "relay-a", "relay-b")
	s.claim(t, &repo.ClaimOutboxParams{RelayID: relay, BatchSize: 3, LockDuration: 20 * time.Second})
	var ds []repo.Dispatch
	var failed []*attemptModel
	for _, am := range s.m.attempts {
		if am.o.Status != kfstype.OutboxStatusDispatching || *am.o.LockedBy != relay || !am.o.UpdatedAt.Equal(s.m.now) {
			continue // not claimed just now
		}
		if pct(t, "publishFails") < 25 {
			failed = append(failed, am)
			continue
		}
		ds = append(ds, repo.Dispatch{OutboxID: am.o.ID, LockToken: *am.o.LockToken, QueueJobID: s.nextJob()})
	}
	if len(ds) > 0 {
		s.check(t)
		s.markDispatched(t, &repo.MarkDispatchedParams{Dispatches: ds, VisibilityTimeout: 20 * time.Second})
	}
	for _, am := range failed {
		s.check(t)
		s.release(t, &repo.ReleaseOutboxParams{
			OutboxID: am.o.ID, LockToken: *am.o.LockToken, Backoff: time.Second,
			MaxDispatchAttempts: int32(2 + uniform(t, "maxDispatch", 2)), LastError: "publish failed: queue unavailable",
		})
	}
}

// --- other actors' clocks ---

// at runs f as an actor whose clock reads when, not the sequence's: the
// model and the repo both see when, and the sequence's clock is untouched
// (it may be behind or ahead of when afterwards).
func (s *seq) at(when time.Time, f func()) {
	now, r := s.m.now, s.repo
	s.m.now, s.repo = when, repo.New(&repo.Config{Clock: testfactory.ClockAt(when)})
	defer func() { s.m.now, s.repo = now, r }()
	f()
}

// leased is the attempts running under a lease whose outbox row is leased.
func (s *seq) leased() []*attemptModel {
	var out []*attemptModel
	for _, am := range s.m.attempts {
		if am.a.RunState == kfstype.RunStateRunning && am.o.Status == kfstype.OutboxStatusLeased {
			out = append(out, am)
		}
	}
	return out
}

// reclaim has a relay whose clock is at or up to 2 s past a leased
// attempt's expiry claim every row due then, as it does for a lost
// worker; it returns the attempt and its lease's expiry.
func (s *seq) reclaim(t *rapid.T) (*attemptModel, time.Time) {
	leased := s.leased()
	if len(leased) == 0 {
		t.Skip("no leased attempt")
	}
	am := leased[uniform(t, "leased", len(leased))]
	expiry := *am.a.LeaseExpiresAt
	s.at(expiry.Add(time.Duration(uniform(t, "relayAfterMs", 2001))*time.Millisecond), func() {
		s.claim(t, &repo.ClaimOutboxParams{RelayID: "relay-ahead", BatchSize: repo.MaxBatchSize})
	})
	s.check(t)
	require.Equal(s.tb, kfstype.OutboxStatusDispatching, am.o.Status, "the relay reclaims the expired lease's row")
	return am, expiry
}

// before is a time 1 ms to 1 s before t.
func before(rt *rapid.T, t time.Time) time.Time {
	return t.Add(-time.Duration(1+uniform(rt, "beforeMs", 1000)) * time.Millisecond)
}

// ReclaimDuringHeartbeat: the relay reclaims a leased row at its lease's
// expiry, then the lease holder heartbeats with a clock still before the
// expiry (its transaction began earlier, or it waited on a lock). The
// lease is lost: refused, nothing changes (issue 13).
func (s *seq) ReclaimDuringHeartbeat(t *rapid.T) {
	am, expiry := s.reclaim(t)
	s.h.stats.rows("ReclaimDuringHeartbeat runs", 1, 0)
	lease := am.leases[len(am.leases)-1]
	s.at(before(t, expiry), func() {
		s.heartbeat(t, &repo.HeartbeatParams{Lease: &lease, LeaseDuration: draw(t, "lease", time.Duration(0), 10*time.Second)})
	})
}

// DeadLetterWhileRunning: the relay reclaims a leased row at its lease's
// expiry, its publication fails with the dispatch attempts used up, and it
// releases the row with a clock before the expiry (the lease live: the row
// goes back to the lease, the attempt keeps running) or after it (the
// attempt is dead-lettered).
func (s *seq) DeadLetterWhileRunning(t *rapid.T) {
	am, expiry := s.reclaim(t)
	s.h.stats.rows("DeadLetterWhileRunning runs", 1, 0)
	when := before(t, expiry)
	if pct(t, "releaseAfterExpiry") < 30 {
		when = am.o.UpdatedAt // the relay's own clock at the claim: at or past the expiry
	}
	p := &repo.ReleaseOutboxParams{
		OutboxID: am.o.ID, LockToken: *am.o.LockToken, Backoff: time.Second,
		MaxDispatchAttempts: am.o.DispatchAttempts - int32(uniform(t, "exhaustedBy", 2)),
		LastError:           "publish failed: message rejected",
	}
	if p.MaxDispatchAttempts < 1 {
		p.MaxDispatchAttempts = 1
	}
	s.at(when, func() { s.release(t, p) })
}

// drawToken picks an outbox row and a lock token for it: the current
// claim's (mostly), an older claim's, or a token no claim handed out.
func (s *seq) drawToken(t *rapid.T) (uuid.UUID, uuid.UUID) {
	am := s.drawAttempt(t, func(am *attemptModel) bool { return am.o.Status == kfstype.OutboxStatusDispatching })
	switch v := pct(t, "token"); {
	case v < 75 && am.o.LockToken != nil:
		return am.o.ID, *am.o.LockToken
	case v < 92 && len(am.tokens) > 0:
		return am.o.ID, am.tokens[uniform(t, "oldToken", len(am.tokens))]
	case v < 96:
		return uuid.New(), uuid.New()
	}
	return am.o.ID, uuid.New()
}

func (s *seq) MarkDispatched(t *rapid.T) {
	var ds []repo.Dispatch
	seen := map[uuid.UUID]bool{}
	add := func(outboxID, token uuid.UUID) {
		if seen[outboxID] {
			return
		}
		seen[outboxID] = true
		d := repo.Dispatch{OutboxID: outboxID, LockToken: token, QueueJobID: s.nextJob()}
		if pct(t, "external") < 30 {
			d.ExternalJobID = sp("ext-" + d.QueueJobID)
		}
		ds = append(ds, d)
	}
	for _, am := range s.m.attempts {
		if am.o.Status == kfstype.OutboxStatusDispatching && pct(t, "include") < 80 {
			add(am.o.ID, *am.o.LockToken)
		}
	}
	if len(ds) == 0 || pct(t, "extra") < 25 {
		add(s.drawToken(t))
	}
	if pct(t, "invalid") < 3 {
		ds = append(ds, ds[0]) // the same row twice
	}
	s.markDispatched(t, &repo.MarkDispatchedParams{Dispatches: ds, VisibilityTimeout: draw(t, "visibility", time.Duration(0), 20*time.Second)})
}

func (s *seq) markDispatched(t *rapid.T, p *repo.MarkDispatchedParams) {
	ds := p.Dispatches
	marked, want := s.m.markDispatched(p)
	got, err := s.repo.MarkDispatched(s.ctx, s.h.pool, p)
	s.expect(t, "MarkDispatched", want, err)
	if want != clsOK {
		return
	}
	s.h.stats.rows("MarkDispatched rows", len(marked), len(ds)-len(marked))
	var refused []uuid.UUID
	isMarked := map[uuid.UUID]bool{}
	for _, id := range marked {
		isMarked[id] = true
	}
	for _, d := range ds {
		if !isMarked[d.OutboxID] {
			refused = append(refused, d.OutboxID)
		}
	}
	if len(refused)+len(got.Refused) > 0 {
		require.Equal(s.tb, refused, got.Refused, "MarkDispatched refused rows (in input order)")
	}
	gotMarked := make([]uuid.UUID, len(got.Marked))
	for i, o := range got.Marked {
		gotMarked[i] = o.ID
		s.requireOutbox("MarkDispatched", o, s.m.findOutbox(o.ID))
	}
	require.ElementsMatch(s.tb, marked, gotMarked, "MarkDispatched marked rows")
}

func (s *seq) ReleaseOutbox(t *rapid.T) {
	outboxID, token := s.drawToken(t)
	p := &repo.ReleaseOutboxParams{
		OutboxID: outboxID, LockToken: token,
		Backoff:             draw(t, "backoff", time.Second, 5*time.Second, 20*time.Second),
		MaxDispatchAttempts: int32(2 + uniform(t, "maxDispatch", 2)),
		LastError:           "publish failed: queue unavailable",
	}
	if pct(t, "invalid") < 3 {
		p.LastError = ""
	}
	s.release(t, p)
}

func (s *seq) release(t *rapid.T, p *repo.ReleaseOutboxParams) {
	want := s.m.releaseOutbox(p)
	got, err := s.repo.ReleaseOutbox(s.ctx, s.h.pool, p)
	s.expect(t, "ReleaseOutbox", want, err)
	if want == clsOK {
		am := s.m.findOutbox(p.OutboxID)
		s.requireOutbox("ReleaseOutbox", got, am)
		switch am.o.Status {
		case kfstype.OutboxStatusDead:
			s.h.stats.rows("ReleaseOutbox dead-lettered", 1, 0)
		case kfstype.OutboxStatusLeased:
			s.h.stats.rows("ReleaseOutbox handed back to the live lease", 1, 0)
		default:
			s.h.stats.rows("ReleaseOutbox backed off", 1, 0)
		}
	}
}
