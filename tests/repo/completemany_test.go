package repo_test

import (
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/knowledgefs/kfsdb/kfstype"
	"github.com/knowledgefs/kfsdb/repo"
	"github.com/knowledgefs/kfsdb/tests/testfactory"
)

// cmCountedPool returns a second pool on b's database whose statements
// counter counts.
func (b *testBundle) cmCountedPool(t *testing.T) (*pgxpool.Pool, *statementCounter) {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(b.db.URL)
	require.NoError(t, err)
	counter := &statementCounter{}
	cfg.ConnConfig.Tracer = counter
	pool, err := pgxpool.NewWithConfig(b.ctx, cfg)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	return pool, counter
}

// cmSucceeded is before completed at now by Complete or CompleteThrough:
// ended succeeded at published, its outbox row completed, binding c if
// given (nil: the bound candidate is kept).
func cmSucceeded(before *testfactory.Rows, now time.Time, c *rwCandidate) *testfactory.Rows {
	want := testfactory.ExpectEnded(before, kfstype.RunStateSucceeded, kfstype.OutboxStatusCompleted, now)
	want.Attempt.Checkpoint = kfstype.CheckpointPublished
	if c != nil {
		want.Attempt.CandidatePublicationID, want.Attempt.CandidateFingerprint = c.id, c.fp
	}
	return want
}

// TestCompleteMany: a batch of Complete and CompleteThrough entries is
// recorded in one statement, each row ending exactly as its single call
// would; an entry its guard refuses gets the single call's typed error
// and keeps its rows, without holding back the others; a malformed batch
// is refused whole before any round trip.
func TestCompleteMany(t *testing.T) {
	t.Parallel()

	t.Run("MixedBatchInOneStatement", func(t *testing.T) {
		b := setup(t)
		pool, counter := b.cmCountedPool(t)
		type entry struct {
			e      repo.CompleteManyEntry
			before *testfactory.Rows
			binds  *rwCandidate
		}
		var entries []*entry
		// Plain Complete at smoke_eval_passed.
		for range 2 {
			_, lease, _ := b.drv.Running(b.ctx, t, b.scope(t), &testfactory.RunningOpts{Checkpoint: new(kfstype.CheckpointSmokeEvalPassed)})
			entries = append(entries, &entry{e: repo.CompleteManyEntry{Lease: lease}})
		}
		// Through from queued and from parsed, binding a fresh candidate.
		for _, from := range []kfstype.Checkpoint{kfstype.CheckpointQueued, kfstype.CheckpointParsed} {
			s := b.scope(t)
			_, lease, _ := b.drv.Running(b.ctx, t, s, nil)
			if from != kfstype.CheckpointQueued {
				b.drv.AdvanceTo(b.ctx, t, s, lease, from)
			}
			c := b.rwPub(t, s, "candidate")
			entries = append(entries, &entry{e: repo.CompleteManyEntry{Lease: lease, Through: true, CandidatePublicationID: c.id, CandidateFingerprint: c.fp}, binds: &c})
		}
		// Through from projection_built with the candidate bound there:
		// none given, and the bound one given again.
		for _, again := range []bool{false, true} {
			_, lease, _ := b.drv.Running(b.ctx, t, b.scope(t), &testfactory.RunningOpts{Checkpoint: new(kfstype.CheckpointProjectionBuilt)})
			e := repo.CompleteManyEntry{Lease: lease, Through: true}
			if again {
				a := b.rows(t, lease.AttemptID).Attempt
				e.CandidatePublicationID, e.CandidateFingerprint = a.CandidatePublicationID, a.CandidateFingerprint
			}
			entries = append(entries, &entry{e: e})
		}
		// Through from smoke_eval_passed, nothing given.
		_, lease, _ := b.drv.Running(b.ctx, t, b.scope(t), &testfactory.RunningOpts{Checkpoint: new(kfstype.CheckpointSmokeEvalPassed)})
		entries = append(entries, &entry{e: repo.CompleteManyEntry{Lease: lease, Through: true}})

		b.clock.Advance(5 * time.Second)
		in := make([]repo.CompleteManyEntry, len(entries))
		for i, e := range entries {
			e.before = b.rows(t, e.e.Lease.AttemptID)
			in[i] = e.e
		}
		var res []repo.CompleteManyResult
		n := counter.count(func() {
			var err error
			res, err = b.repo.CompleteMany(b.ctx, pool, &repo.CompleteManyParams{Entries: in})
			require.NoError(t, err)
		})
		require.EqualValues(t, 1, n, "statements sent for a batch every guard accepts")
		require.Len(t, res, len(entries))
		for i, e := range entries {
			require.NoError(t, res[i].Err, "entry %d", i)
			want := cmSucceeded(e.before, b.clock.Now(), e.binds)
			if e.binds == nil {
				require.NotNil(t, e.before.Attempt.CandidatePublicationID, "entry %d keeps its bound candidate", i)
			}
			require.Equal(t, want, b.rows(t, e.e.Lease.AttemptID), "entry %d", i)
			require.NotNil(t, res[i].Attempt, "entry %d", i)
			require.Equal(t, want.Attempt, *res[i].Attempt, "entry %d: the result is the row, in input order", i)
		}
	})

	t.Run("SameRowsAsSingleCalls", func(t *testing.T) {
		// Twin attempts walked to the same checkpoints and completed by
		// the single calls and by one batch end in the same rows, but for
		// what differs by construction.
		b := setup(t)
		type twin struct {
			through bool
			from    kfstype.Checkpoint
		}
		twins := []twin{{false, kfstype.CheckpointSmokeEvalPassed}, {true, kfstype.CheckpointQueued}, {true, kfstype.CheckpointNodesGenerated}, {true, kfstype.CheckpointProjectionBuilt}}
		prepare := func(tw twin) (repo.CompleteManyEntry, uuid.UUID) {
			s := b.scope(t)
			_, lease, _ := b.drv.Running(b.ctx, t, s, nil)
			if tw.from != kfstype.CheckpointQueued {
				b.drv.AdvanceTo(b.ctx, t, s, lease, tw.from)
			}
			e := repo.CompleteManyEntry{Lease: lease, Through: tw.through}
			if tw.through && tw.from.Rank() < kfstype.CheckpointProjectionBuilt.Rank() {
				c := b.rwPub(t, s, "candidate")
				e.CandidatePublicationID, e.CandidateFingerprint = c.id, c.fp
			}
			return e, lease.AttemptID
		}
		var single, batch []uuid.UUID
		var in []repo.CompleteManyEntry
		for _, tw := range twins {
			e, id := prepare(tw)
			single = append(single, id)
			if e.Through {
				_, err := b.repo.CompleteThrough(b.ctx, b.db.Pool, &repo.CompleteThroughParams{Lease: e.Lease, CandidatePublicationID: e.CandidatePublicationID, CandidateFingerprint: e.CandidateFingerprint})
				require.NoError(t, err)
			} else {
				_, err := b.repo.Complete(b.ctx, b.db.Pool, &repo.CompleteParams{Lease: e.Lease})
				require.NoError(t, err)
			}
			e, id = prepare(tw)
			batch = append(batch, id)
			in = append(in, e)
		}
		res, err := b.repo.CompleteMany(b.ctx, b.db.Pool, &repo.CompleteManyParams{Entries: in})
		require.NoError(t, err)
		norm := func(r *testfactory.Rows) *testfactory.Rows {
			a, o := &r.Attempt, &r.Outbox
			a.ID, a.TenantID, a.KnowledgeSpaceID, a.DocumentAssetID, a.PublicationGenerationID = uuid.Nil, "", uuid.Nil, uuid.Nil, uuid.Nil
			require.NotNil(t, a.CandidatePublicationID)
			a.CandidatePublicationID, a.CandidateFingerprint, a.QueueJobID = nil, nil, nil
			o.ID, o.AttemptID, o.Payload, o.IdempotencyKey, o.QueueJobID = uuid.Nil, uuid.Nil, nil, "", nil
			return r
		}
		for i := range twins {
			require.NoError(t, res[i].Err)
			require.Equal(t, norm(b.rows(t, single[i])), norm(b.rows(t, batch[i])), "twin %d (%+v)", i, twins[i])
		}
	})

	t.Run("RefusedEntriesGetTheirOwnErrors", func(t *testing.T) {
		b := setup(t)
		pool, counter := b.cmCountedPool(t)

		// Good: plain Complete at smoke_eval_passed.
		_, good0, _ := b.drv.Running(b.ctx, t, b.scope(t), &testfactory.RunningOpts{Checkpoint: new(kfstype.CheckpointSmokeEvalPassed)})
		// Stale: the right attempt and worker, another token.
		_, lease1, _ := b.drv.Running(b.ctx, t, b.scope(t), &testfactory.RunningOpts{Checkpoint: new(kfstype.CheckpointSmokeEvalPassed)})
		stale := *lease1
		stale.Token = uuid.New()
		// Early: plain Complete at nodes_generated.
		_, early, _ := b.drv.Running(b.ctx, t, b.scope(t), &testfactory.RunningOpts{Checkpoint: new(kfstype.CheckpointNodesGenerated)})
		// Rejected: Through from parsed with an unknown publication.
		_, rejected, _ := b.drv.Running(b.ctx, t, b.scope(t), &testfactory.RunningOpts{Checkpoint: new(kfstype.CheckpointParsed)})
		bogus := rwCandidate{new(uuid.New()), new(testfactory.Fingerprint("bogus"))}
		// Good: Through from queued binding a fresh candidate.
		s4 := b.scope(t)
		_, good4, _ := b.drv.Running(b.ctx, t, s4, nil)
		c4 := b.rwPub(t, s4, "candidate")
		// Rejected too: Through from smoke_eval_passed with another
		// candidate than the bound one.
		s5 := b.scope(t)
		_, rebind, _ := b.drv.Running(b.ctx, t, s5, &testfactory.RunningOpts{Checkpoint: new(kfstype.CheckpointSmokeEvalPassed)})
		c5 := b.rwPub(t, s5, "candidate")

		in := []repo.CompleteManyEntry{
			{Lease: good0},
			{Lease: &stale},
			{Lease: early},
			{Lease: rejected, Through: true, CandidatePublicationID: bogus.id, CandidateFingerprint: bogus.fp},
			{Lease: good4, Through: true, CandidatePublicationID: c4.id, CandidateFingerprint: c4.fp},
			{Lease: rebind, Through: true, CandidatePublicationID: c5.id, CandidateFingerprint: c5.fp},
		}
		b.clock.Advance(5 * time.Second)
		before := make([]*testfactory.Rows, len(in))
		for i, e := range in {
			before[i] = b.rows(t, e.Lease.AttemptID)
		}
		var res []repo.CompleteManyResult
		n := counter.count(func() {
			var err error
			res, err = b.repo.CompleteMany(b.ctx, pool, &repo.CompleteManyParams{Entries: in})
			require.NoError(t, err)
		})
		require.Len(t, res, len(in))
		// The batch, then each of the 4 refused entries alone: its write
		// and the read that says why.
		require.EqualValues(t, 1+4*2, n, "statements sent")

		now := b.clock.Now()
		for _, i := range []int{0, 4} {
			require.NoError(t, res[i].Err, "entry %d", i)
			var c *rwCandidate
			if i == 4 {
				c = &c4
			}
			want := cmSucceeded(before[i], now, c)
			require.Equal(t, want, b.rows(t, in[i].Lease.AttemptID), "entry %d", i)
			require.Equal(t, want.Attempt, *res[i].Attempt, "entry %d", i)
		}

		require.ErrorIs(t, res[1].Err, repo.ErrLeaseLost)
		require.NotErrorIs(t, res[1].Err, repo.ErrInvalidTransition)

		var te *repo.TransitionError
		require.ErrorAs(t, res[2].Err, &te)
		require.ErrorIs(t, res[2].Err, repo.ErrInvalidTransition)
		require.Equal(t, kfstype.CheckpointNodesGenerated, te.Checkpoint)
		require.Equal(t, kfstype.RunStateSucceeded, te.To)

		for _, i := range []int{3, 5} {
			require.ErrorIs(t, res[i].Err, repo.ErrCandidateRejected, "entry %d", i)
			require.NotErrorIs(t, res[i].Err, repo.ErrInvalidTransition, "entry %d", i)
			require.NotErrorIs(t, res[i].Err, repo.ErrLeaseLost, "entry %d", i)
		}
		for _, i := range []int{1, 2, 3, 5} {
			require.Nil(t, res[i].Attempt, "entry %d", i)
			b.requireUnchanged(t, before[i])
		}
	})

	t.Run("ExpiredLeaseIsLost", func(t *testing.T) {
		// One lease lapsed, the other still good: the first is lost, the
		// second completes.
		b := setup(t)
		s := b.scope(t)
		a := b.drv.Start(b.ctx, t, s, nil)
		del := b.drv.Dispatch(b.ctx, t, a.ID, &testfactory.DispatchOpts{QueueJobID: new("job-short")})
		_, lease, err := b.repo.AcquireLease(b.ctx, b.db.Pool, &repo.AcquireLeaseParams{Delivery: *del, WorkerID: "worker-test", LeaseDuration: 10 * time.Second})
		require.NoError(t, err)
		b.drv.AdvanceTo(b.ctx, t, s, lease, kfstype.CheckpointSmokeEvalPassed)
		s2 := b.scope(t)
		_, other, _ := b.drv.Running(b.ctx, t, s2, nil)
		c := b.rwPub(t, s2, "candidate")
		b.clock.Advance(10 * time.Second)
		before := b.rows(t, lease.AttemptID)
		before2 := b.rows(t, other.AttemptID)
		res, err := b.repo.CompleteMany(b.ctx, b.db.Pool, &repo.CompleteManyParams{Entries: []repo.CompleteManyEntry{{Lease: lease}, {Lease: other, Through: true, CandidatePublicationID: c.id, CandidateFingerprint: c.fp}}})
		require.NoError(t, err)
		require.ErrorIs(t, res[0].Err, repo.ErrLeaseLost)
		require.Nil(t, res[0].Attempt)
		b.requireUnchanged(t, before)
		require.NoError(t, res[1].Err)
		require.Equal(t, cmSucceeded(before2, b.clock.Now(), &c), b.rows(t, other.AttemptID))
	})

	t.Run("RejectsInvalidBatch", func(t *testing.T) {
		b := setup(t)
		pool, counter := b.cmCountedPool(t)
		_, l0, _ := b.drv.Running(b.ctx, t, b.scope(t), &testfactory.RunningOpts{Checkpoint: new(kfstype.CheckpointSmokeEvalPassed)})
		s1 := b.scope(t)
		_, l1, _ := b.drv.Running(b.ctx, t, s1, nil)
		c1 := b.rwPub(t, s1, "candidate")
		before := []*testfactory.Rows{b.rows(t, l0.AttemptID), b.rows(t, l1.AttemptID)}
		good := []repo.CompleteManyEntry{{Lease: l0}, {Lease: l1, Through: true, CandidatePublicationID: c1.id, CandidateFingerprint: c1.fp}}

		many := make([]repo.CompleteManyEntry, repo.MaxBatchSize+1)
		for i := range many {
			many[i] = good[0]
		}
		require.Equal(t, 100, repo.MaxBatchSize)
		for _, tc := range []struct {
			name    string
			entries []repo.CompleteManyEntry
			field   string
		}{
			{"Nil", nil, "Entries"},
			{"Empty", []repo.CompleteManyEntry{}, "Entries"},
			{"TooMany", many, "Entries"},
			{"DuplicateAttempt", []repo.CompleteManyEntry{good[0], good[1], {Lease: l0, Through: true}}, "Entries[2]"},
			{"DuplicateAttemptOtherToken", []repo.CompleteManyEntry{good[1], {Lease: &repo.Lease{AttemptID: l1.AttemptID, WorkerID: l1.WorkerID, Token: uuid.New()}}}, "Entries[1]"},
			{"NilLease", []repo.CompleteManyEntry{good[0], {Through: true}}, "Entries[1].Lease"},
			{"LeaseWithoutToken", []repo.CompleteManyEntry{good[0], {Lease: &repo.Lease{AttemptID: l1.AttemptID, WorkerID: l1.WorkerID}}}, "Entries[1].Lease.Token"},
			{"CandidateWithoutThrough", []repo.CompleteManyEntry{{Lease: l1, CandidatePublicationID: c1.id, CandidateFingerprint: c1.fp}, good[0]}, "Entries[0].CandidatePublicationID"},
			{"IDWithoutFingerprint", []repo.CompleteManyEntry{good[0], {Lease: l1, Through: true, CandidatePublicationID: c1.id}}, "Entries[1].CandidatePublicationID"},
			{"MalformedFingerprint", []repo.CompleteManyEntry{good[0], {Lease: l1, Through: true, CandidatePublicationID: c1.id, CandidateFingerprint: new("bad")}}, "Entries[1].CandidateFingerprint"},
		} {
			t.Run(tc.name, func(t *testing.T) {
				var res []repo.CompleteManyResult
				n := counter.count(func() {
					var err error
					res, err = b.repo.CompleteMany(b.ctx, pool, &repo.CompleteManyParams{Entries: tc.entries})
					requireInputError(t, err, tc.field)
				})
				require.Nil(t, res)
				require.Zero(t, n, "refused before any round trip")
				for _, r := range before {
					b.requireUnchanged(t, r)
				}
			})
		}

		// The same two entries, well formed, go through.
		res, err := b.repo.CompleteMany(b.ctx, pool, &repo.CompleteManyParams{Entries: good})
		require.NoError(t, err)
		for i := range good {
			require.NoError(t, res[i].Err)
			require.Equal(t, kfstype.RunStateSucceeded, b.rows(t, good[i].Lease.AttemptID).Attempt.RunState)
		}
	})
}

// TestCompleteManySingleEntry checks a batch of one entry: it is Complete
// or CompleteThrough as the entry says (the worker makes that choice for
// its single completions itself), and a candidate without Through is
// refused before any round trip, the row unchanged.
func TestCompleteManySingleEntry(t *testing.T) {
	b := setup(t)
	s := b.scope(t)
	_, lease, _ := b.drv.Running(b.ctx, t, s, nil)
	id, fp := s.Publication(b.ctx, t, b.db.Pool, "candidate")
	before := b.rows(t, lease.AttemptID)

	_, err := b.repo.CompleteMany(b.ctx, b.db.Pool, &repo.CompleteManyParams{Entries: []repo.CompleteManyEntry{{Lease: lease, CandidatePublicationID: &id, CandidateFingerprint: &fp}}})
	requireInputError(t, err, "Entries[0].CandidatePublicationID")
	res, err := b.repo.CompleteMany(b.ctx, b.db.Pool, &repo.CompleteManyParams{Entries: []repo.CompleteManyEntry{{Lease: lease}}})
	require.NoError(t, err)
	require.ErrorIs(t, res[0].Err, repo.ErrInvalidTransition, "plain Complete at queued")
	b.requireUnchanged(t, before)

	res, err = b.repo.CompleteMany(b.ctx, b.db.Pool, &repo.CompleteManyParams{Entries: []repo.CompleteManyEntry{{Lease: lease, Through: true, CandidatePublicationID: &id, CandidateFingerprint: &fp}}})
	require.NoError(t, err)
	require.NoError(t, res[0].Err)
	got := res[0].Attempt
	require.Equal(t, kfstype.RunStateSucceeded, got.RunState)
	require.Equal(t, kfstype.CheckpointPublished, got.Checkpoint)
	require.Equal(t, &id, got.CandidatePublicationID)
}
