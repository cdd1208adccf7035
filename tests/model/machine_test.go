package model_test

import (
	"context"
	"fmt"
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
	if !step(1, true, func() { s.claim(t, &repo.ClaimOutboxParams{RelayID: "relay-a", BatchSize: 1}) }) {
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
