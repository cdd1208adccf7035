package model_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"
	"pgregory.net/rapid"

	"github.com/knowledgefs/kfsdb/kfstype"
	"github.com/knowledgefs/kfsdb/repo"
	"github.com/knowledgefs/kfsdb/tests/pgtest"
	"github.com/knowledgefs/kfsdb/tests/testfactory"
)

// TestModel runs rapid's state machine on modelWorkers parallel workers,
// each a subtest with its own database and its own rapid.Check of
// -rapid.checks sequences. Every sequence gets fresh scopes, its own Repo
// and manual clock, and ends by canceling its live attempts, so no row of
// it is ever claimable by a later sequence (ClaimOutbox is global to the
// worker's database).
func TestModel(t *testing.T) {
	st := newStats()
	t.Cleanup(func() { t.Logf("model: %s", st.report()) })
	for w := range modelWorkers {
		t.Run(fmt.Sprintf("worker%d", w), func(t *testing.T) {
			t.Parallel()
			h := &harness{pool: newPool(t), outer: t, stats: st}
			rapid.Check(t, h.sequence)
			h.mu.Lock()
			defer h.mu.Unlock()
			require.Empty(t, h.cleanupErrs, "cleanup of sequences")
		})
	}
}

// newPool creates the worker's database and a pool on it whose sessions
// commit without waiting for the WAL write (synchronous_commit off): the
// state machine is the same, and a sequence runs thousands of one-statement
// transactions, each otherwise waiting for its WAL write.
func newPool(t *testing.T) *pgxpool.Pool {
	db := pgtest.NewDB(t)
	cfg, err := pgxpool.ParseConfig(db.URL)
	require.NoError(t, err)
	cfg.ConnConfig.RuntimeParams["synchronous_commit"] = "off"
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	require.NoError(t, err)
	t.Cleanup(pool.Close) // runs before NewDB's cleanup drops the database
	return pool
}

// harness is shared by a test's sequences, which run one after another.
type harness struct {
	pool  *pgxpool.Pool
	outer *testing.T
	stats *stats

	mu          sync.Mutex
	base        time.Time // the next sequence's clock starts at or after it
	cleanupErrs []string
}

// opWeights sets how often rapid draws each operation: the happy path
// (claim, mark, lease, advance, complete) needs more draws than the rest
// for sequences to reach its later states. An operation of weight w is
// registered w times ("Advance", "Advance~2", …), which is how rapid's
// Repeat, drawing action names uniformly, is weighted.
var opWeights = map[string]int{
	"Start": 2, "ReleaseDeferred": 1, "ClaimOutbox": 3, "MarkDispatched": 3, "ReleaseOutbox": 1,
	"AcquireLease": 3, "FailExhausted": 2, "Heartbeat": 1, "Advance": 6, "AdvanceTo": 3, "Complete": 2, "CompleteThrough": 2, "Fail": 2,
	"ScheduleRetry": 1, "Cancel": 1, "Supersede": 1, "RetryFailed": 2, "AdvanceClock": 3, "SetHead": 1,
	"RelayCycle": 2, "ReclaimDuringHeartbeat": 1, "DeadLetterWhileRunning": 1,
}

// seq is one rapid sequence: the database side (repo, clock, scopes) and
// the reference model it is compared with.
type seq struct {
	h      *harness
	ctx    context.Context
	tb     testing.TB
	clock  *testfactory.Clock
	repo   *repo.Repo
	scopes [2]*testfactory.Scope
	// cands are each scope's candidate publications (valid to bind);
	// other is a publication in scope 0 that is not a candidate.
	cands [2][]testfactory.Candidate
	other testfactory.Candidate
	m     *model
	jobs  int
}

func (h *harness) sequence(t *rapid.T) {
	h.stats.sequence()
	ctx := context.Background()
	tb := rapidTB{TB: h.outer, rt: t}
	clock := testfactory.NewClock()
	h.mu.Lock()
	if clock.Now().Before(h.base) {
		clock.Advance(h.base.Sub(clock.Now()))
	}
	h.mu.Unlock()
	s := &seq{h: h, ctx: ctx, tb: tb, clock: clock, repo: repo.New(&repo.Config{Clock: clock})}
	s.m = &model{now: clock.Now(), pubs: map[uuid.UUID]pub{}}
	for i := range s.scopes {
		v := int32(i + 1)
		sc := testfactory.NewScope(ctx, tb, h.pool, &testfactory.ScopeOpts{DocumentVersion: &v})
		s.scopes[i] = sc
		s.m.scopes[i] = scopeRef{tenant: sc.TenantID, space: sc.KnowledgeSpaceID, asset: sc.DocumentAssetID, version: sc.DocumentVersion}
	}
	for i, n := range []int{2, 1} {
		for range n {
			id, fp := s.scopes[i].Publication(ctx, tb, h.pool, "candidate")
			s.cands[i] = append(s.cands[i], testfactory.Candidate{ID: id, Fingerprint: fp})
			s.m.pubs[id] = pub{scope: i, fp: fp, status: "candidate"}
		}
	}
	id, fp := s.scopes[0].Publication(ctx, tb, h.pool, "validating")
	s.other = testfactory.Candidate{ID: id, Fingerprint: fp}
	s.m.pubs[id] = pub{scope: 0, fp: fp, status: "validating"}
	defer s.cleanup()

	actions := map[string]func(*rapid.T){
		"Start": s.Start, "ReleaseDeferred": s.ReleaseDeferred, "ClaimOutbox": s.ClaimOutbox,
		"MarkDispatched": s.MarkDispatched, "ReleaseOutbox": s.ReleaseOutbox, "AcquireLease": s.AcquireLease,
		"FailExhausted": s.FailExhausted, "Heartbeat": s.Heartbeat, "Advance": s.Advance, "AdvanceTo": s.AdvanceTo,
		"Complete": s.Complete, "CompleteThrough": s.CompleteThrough,
		"Fail": s.Fail, "ScheduleRetry": s.ScheduleRetry, "Cancel": s.Cancel, "Supersede": s.Supersede,
		"RetryFailed": s.RetryFailed, "AdvanceClock": s.AdvanceClock, "SetHead": s.SetHead,
		"RelayCycle": s.RelayCycle, "ReclaimDuringHeartbeat": s.ReclaimDuringHeartbeat,
		"DeadLetterWhileRunning": s.DeadLetterWhileRunning,
	}
	weighted := map[string]func(*rapid.T){"": s.check}
	for name, fn := range actions {
		for i := range opWeights[name] {
			key := name
			if i > 0 {
				key = fmt.Sprintf("%s~%d", name, i+1)
			}
			weighted[key] = fn
		}
	}
	s.prefix(t)
	t.Repeat(weighted)
	s.checkCount()
	for _, am := range s.m.attempts {
		state := string(am.a.RunState)
		if am.a.RunState == kfstype.RunStateFailed {
			state += " " + *am.a.LastErrorCode
		}
		h.stats.rows("attempts at sequence end: "+state, 1, 0)
	}
}

// prefix starts the sequence's first attempt (so every action has a
// target) and walks it along the happy path to a random depth: claimed,
// dispatched, leased, each checkpoint, completed (sometimes the checkpoints
// in one AdvanceTo, or completed through them with CompleteThrough). Each
// step is a checked operation like any other; it only saves the random
// part of the sequence the many draws it would take to get this far.
func (s *seq) prefix(t *rapid.T) {
	s.start(t, 0, false)
	s.check(t)
	if pct(t, "deferredSecond") < 25 {
		p := s.scopes[1].StartParams()
		p.Deferred = true
		s.startWith(t, p)
		s.check(t)
	}
	am := s.m.attempts[0]
	depth := uniform(t, "prefix", 11)
	step := func(n int, ready bool, run func()) bool {
		if depth < n || !ready {
			return false
		}
		run()
		s.check(t)
		return true
	}
	if !step(1, true, func() { s.claim(t, &repo.ClaimParams{RelayID: "relay-a", BatchSize: 1}) }) {
		return
	}
	if !step(2, am.o.LockToken != nil, func() {
		s.markDispatched(t, &repo.MarkDispatchedParams{Dispatches: []repo.Dispatch{{OutboxID: am.o.ID, LockToken: *am.o.LockToken, QueueJobID: s.nextJob()}}})
	}) {
		return
	}
	if !step(3, am.a.QueueJobID != nil, func() {
		s.acquire(t, &repo.AcquireLeaseParams{Delivery: repo.Delivery{AttemptID: am.a.ID, QueueJobID: *am.a.QueueJobID}, WorkerID: "worker-a"})
	}) {
		return
	}
	if depth > 3 && am.a.RunState == kfstype.RunStateRunning && pct(t, "prefixOneWrite") < 30 {
		// The handler that has nothing to persist between checkpoints:
		// one AdvanceTo to the depth's checkpoint, or CompleteThrough.
		lease := &am.leases[len(am.leases)-1]
		cand := s.cands[0][0]
		if depth == 10 {
			s.completeThrough(t, &repo.CompleteThroughParams{Lease: lease, CandidatePublicationID: &cand.ID, CandidateFingerprint: &cand.Fingerprint})
			s.check(t)
			return
		}
		p := &repo.AdvanceParams{Lease: lease, Checkpoint: kfstype.Checkpoints()[min(depth-3, kfstype.CheckpointSmokeEvalPassed.Rank())]}
		if p.Checkpoint.NeedsCandidate() {
			p.CandidatePublicationID, p.CandidateFingerprint = &cand.ID, &cand.Fingerprint
		}
		s.advanceTo(t, p)
		s.check(t)
		return
	}
	for cp := 1; cp <= kfstype.CheckpointSmokeEvalPassed.Rank(); cp++ {
		if !step(3+cp, am.a.RunState == kfstype.RunStateRunning, func() {
			p := &repo.AdvanceParams{Lease: &am.leases[len(am.leases)-1], Checkpoint: kfstype.Checkpoints()[cp]}
			if p.Checkpoint == kfstype.CheckpointProjectionBuilt {
				p.CandidatePublicationID, p.CandidateFingerprint = &s.cands[0][0].ID, &s.cands[0][0].Fingerprint
			}
			s.advance(t, p)
		}) {
			return
		}
	}
	step(10, am.a.RunState == kfstype.RunStateRunning, func() { s.complete(t, &am.leases[len(am.leases)-1]) })
}

// cleanup cancels every live attempt of the sequence (read from the
// database, not the model, so it works after a failure too) and moves the
// next sequence's clock past this one's.
func (s *seq) cleanup() {
	h := s.h
	defer func() {
		h.mu.Lock()
		h.base = s.clock.Now().Add(time.Hour)
		h.mu.Unlock()
	}()
	var fail []string
	rows, err := h.pool.Query(s.ctx, `SELECT id, tenant_id, knowledge_space_id FROM document_compilation_attempts
		WHERE tenant_id = ANY($1) AND active_slot = 1`, []string{s.scopes[0].TenantID, s.scopes[1].TenantID})
	var refs []repo.AttemptRef
	if err == nil {
		for rows.Next() {
			var ref repo.AttemptRef
			if err := rows.Scan(&ref.AttemptID, &ref.TenantID, &ref.KnowledgeSpaceID); err != nil {
				fail = append(fail, err.Error())
			}
			refs = append(refs, ref)
		}
		rows.Close()
		err = rows.Err()
	}
	if err != nil {
		fail = append(fail, "list live attempts: "+err.Error())
	}
	for _, ref := range refs {
		if _, err := s.repo.Cancel(s.ctx, h.pool, &repo.CancelParams{AttemptRef: ref}); err != nil {
			fail = append(fail, err.Error())
		}
	}
	if len(fail) > 0 {
		h.mu.Lock()
		h.cleanupErrs = append(h.cleanupErrs, fail...)
		h.mu.Unlock()
	}
}

// check runs after every step: each attempt and its outbox row as stored
// equal the model field by field and satisfy every invariant.
func (s *seq) check(t *rapid.T) {
	for _, am := range s.m.attempts {
		got := testfactory.ReadRows(s.ctx, s.tb, s.h.pool, am.a.ID)
		testfactory.CheckInvariants(s.tb, got)
		p, err := repo.DecodePayload(got.Outbox.Payload)
		require.NoError(s.tb, err)
		require.Equal(s.tb, am.a.ID, p.AttemptID)
		want := testfactory.Rows{Attempt: am.a, Outbox: am.o}
		want.Outbox.Payload = got.Outbox.Payload
		require.Equal(s.tb, want, *got, "attempt %s (scope %d) differs from the model", am.a.ID, am.scope)
	}
}

// checkCount requires that the sequence's tenants hold exactly the
// attempts the model knows. Only Start inserts attempts (and only Purge,
// which the model does not run, deletes them), so it runs after each Start
// and at the end of the sequence rather than after every step.
func (s *seq) checkCount() {
	var n int
	require.NoError(s.tb, s.h.pool.QueryRow(s.ctx, `SELECT count(*) FROM document_compilation_attempts WHERE tenant_id = ANY($1)`,
		[]string{s.scopes[0].TenantID, s.scopes[1].TenantID}).Scan(&n))
	require.Equal(s.tb, len(s.m.attempts), n, "attempts stored for the sequence's tenants")
}

// expect compares a call's error class with the model's and counts it.
func (s *seq) expect(t *rapid.T, kind string, want errClass, err error) {
	cls, cerr := classify(err)
	if cerr != nil {
		t.Fatalf("%s: %v", kind, cerr)
	}
	s.h.stats.op(kind, cls)
	if cls != want {
		t.Fatalf("%s: got %s (%v), the model predicts %s", kind, cls, err, want)
	}
}

// requireAttempt checks an attempt a call returned against the model.
func (s *seq) requireAttempt(kind string, got *kfstype.Attempt, am *attemptModel) {
	require.NotNil(s.tb, got, kind)
	require.Equal(s.tb, am.a, *got, "%s returned an attempt that differs from the model", kind)
}

// requireOutbox checks an outbox row a call returned against the model.
func (s *seq) requireOutbox(kind string, got *kfstype.OutboxMessage, am *attemptModel) {
	require.NotNil(s.tb, got, kind)
	want := am.o
	want.Payload = got.Payload
	require.Equal(s.tb, want, *got, "%s returned an outbox row that differs from the model", kind)
}

// uniform draws from [0, n) evenly. rapid's own integer generators lean
// hard towards small values (a quarter of IntRange(0, 99) draws are below
// 3), which would make every "rare" branch common; hashing the drawn
// value spreads it while keeping it shrinkable (towards mix(0)).
func uniform(t *rapid.T, label string, n int) int {
	g, ok := uniformGens.Load(n)
	if !ok {
		g, _ = uniformGens.LoadOrStore(n, rapid.Map(rapid.Uint64(), func(u uint64) int { return int(mix(u) % uint64(n)) }))
	}
	return g.(*rapid.Generator[int]).Draw(t, label)
}

// uniformGens caches uniform's generators by n.
var uniformGens sync.Map

// mix is SplitMix64's finalizer.
func mix(z uint64) uint64 {
	z += 0x9e3779b97f4a7c15
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
	z = (z ^ (z >> 27)) * 0x94d049bb133111eb
	return z ^ (z >> 31)
}

// pct is a uniform percentage, 0..99.
func pct(t *rapid.T, label string) int { return uniform(t, label, 100) }

// draw picks one of vs uniformly.
func draw[V any](t *rapid.T, label string, vs ...V) V { return vs[uniform(t, label, len(vs))] }

// drawAttempt picks one of the sequence's attempts, one satisfying prefer
// (when any does) 80% of the time.
func (s *seq) drawAttempt(t *rapid.T, prefer func(*attemptModel) bool) *attemptModel {
	var preferred []*attemptModel
	if prefer != nil {
		for _, am := range s.m.attempts {
			if prefer(am) {
				preferred = append(preferred, am)
			}
		}
	}
	pool := s.m.attempts
	if len(preferred) > 0 && pct(t, "prefer") < 80 {
		pool = preferred
	}
	return pool[uniform(t, "attempt", len(pool))]
}

func (s *seq) nextJob() string {
	s.jobs++
	return fmt.Sprintf("job-%d", s.jobs)
}

// --- control plane ---

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
	got, err := s.repo.ReleaseDeferred(s.ctx, s.h.pool, &ref)
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
	got, err := s.repo.RetryFailed(s.ctx, s.h.pool, &ref)
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

// --- relay ---

func (s *seq) ClaimOutbox(t *rapid.T) {
	p := &repo.ClaimParams{
		RelayID:      draw(t, "relay", "relay-a", "relay-b"),
		BatchSize:    int32(1 + uniform(t, "batch", 3)),
		LockDuration: draw(t, "lock", time.Duration(0), 5*time.Second, 20*time.Second),
	}
	if pct(t, "invalid") < 3 {
		p.BatchSize = draw(t, "badBatch", int32(0), repo.MaxBatchSize+1)
	}
	s.claim(t, p)
}

func (s *seq) claim(t *rapid.T, p *repo.ClaimParams) {
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
	s.claim(t, &repo.ClaimParams{RelayID: relay, BatchSize: 3, LockDuration: 20 * time.Second})
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
		s.claim(t, &repo.ClaimParams{RelayID: "relay-ahead", BatchSize: repo.MaxBatchSize})
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

// --- worker ---

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
	got, err := s.repo.FailExhausted(s.ctx, s.h.pool, d)
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
	got, err := s.repo.AdvanceTo(s.ctx, s.h.pool, p)
	s.expect(t, "AdvanceTo", want, err)
	if want == clsOK {
		s.requireAttempt("AdvanceTo", got, s.m.find(p.Lease.AttemptID))
	}
}

func (s *seq) Complete(t *rapid.T) { s.complete(t, s.drawLease(t)) }

func (s *seq) complete(t *rapid.T, l *repo.Lease) {
	want := s.m.complete(l)
	got, err := s.repo.Complete(s.ctx, s.h.pool, l)
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
