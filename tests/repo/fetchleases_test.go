package repo_test

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/knowledgefs/kfsdb/kfstype"
	"github.com/knowledgefs/kfsdb/repo"
	"github.com/knowledgefs/kfsdb/tests/testfactory"
)

// fetch runs FetchLeases for worker with a batch of n.
func (b *testBundle) fetch(t *testing.T, worker string, n int32) *repo.FetchLeasesResult {
	t.Helper()
	res, err := b.repo.FetchLeases(b.ctx, b.db.Pool, &repo.FetchLeasesParams{WorkerID: worker, BatchSize: n})
	require.NoError(t, err)
	for _, la := range res.Leased {
		require.Equal(t, la.Attempt.ID, la.Lease.AttemptID, "a lease goes with its attempt")
		testfactory.RequireInvariants(b.ctx, t, b.db.Pool, la.Attempt.ID)
	}
	for _, a := range res.Exhausted {
		testfactory.RequireInvariants(b.ctx, t, b.db.Pool, a.ID)
	}
	return res
}

// requireFetchedOnly requires res to have leased exactly the attempt whose
// rows were before, as ExpectFetched says, and nothing else.
func (b *testBundle) requireFetchedOnly(t *testing.T, res *repo.FetchLeasesResult, before *testfactory.Rows, worker string) *repo.Lease {
	t.Helper()
	require.Len(t, res.Leased, 1)
	require.Empty(t, res.Exhausted)
	lease := res.Leased[0].Lease
	require.Equal(t, before.Attempt.ID, lease.AttemptID)
	require.Equal(t, worker, lease.WorkerID)
	want := testfactory.ExpectFetched(before, lease, b.clock.Now(), repo.LeaseDurationDefault)
	require.Equal(t, want, b.rows(t, before.Attempt.ID))
	require.Equal(t, want.Attempt, *res.Leased[0].Attempt)
	return lease
}

func TestFetchLeases(t *testing.T) {
	t.Parallel()

	// Each due pairing of the state table is leased straight to running /
	// leased, and not a moment before it is due.
	for _, tc := range []struct {
		name string
		// prepare puts an attempt in the pairing and returns how long
		// until it is due.
		prepare func(b *testBundle, t *testing.T) (uuid.UUID, time.Duration)
	}{
		{"DispatchPendingPending", func(b *testBundle, t *testing.T) (uuid.UUID, time.Duration) {
			return b.drv.Start(b.ctx, t, b.scope(t), &testfactory.StartOpts{AvailableAt: new(b.clock.Now().Add(5 * time.Second))}).ID, 5 * time.Second
		}},
		{"DispatchPendingDispatchingPastItsLock", func(b *testBundle, t *testing.T) (uuid.UUID, time.Duration) {
			a := b.drv.Start(b.ctx, t, b.scope(t), nil)
			b.drv.Claim(b.ctx, t, a.ID)
			return a.ID, repo.LockDurationDefault
		}},
		{"QueuedDispatchedPastItsVisibility", func(b *testBundle, t *testing.T) (uuid.UUID, time.Duration) {
			return b.drv.InState(b.ctx, t, b.scope(t), kfstype.RunStateQueued).ID, repo.VisibilityTimeoutDefault
		}},
		{"RunningLeasedPastItsExpiry", func(b *testBundle, t *testing.T) (uuid.UUID, time.Duration) {
			return b.drv.InState(b.ctx, t, b.scope(t), kfstype.RunStateRunning).ID, repo.LeaseDurationDefault
		}},
		{"RetryWaitPendingAtRetryAt", func(b *testBundle, t *testing.T) (uuid.UUID, time.Duration) {
			return b.drv.InState(b.ctx, t, b.scope(t), kfstype.RunStateRetryWait).ID, 30 * time.Second
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := setup(t)
			id, dueIn := tc.prepare(b, t)
			if dueIn > time.Millisecond {
				b.clock.Advance(dueIn - time.Millisecond)
				before := b.snapshot(t, id)
				require.Empty(t, b.fetch(t, "worker-direct", 10).Leased, "fetched before it was due")
				before.requireUnchanged(t, b)
				b.clock.Advance(time.Millisecond)
			}
			before := b.rows(t, id)
			lease := b.requireFetchedOnly(t, b.fetch(t, "worker-direct", 10), before, "worker-direct")
			// The lease works like AcquireLease's: heartbeat, then complete.
			_, err := b.repo.Heartbeat(b.ctx, b.db.Pool, &repo.HeartbeatParams{Lease: lease})
			require.NoError(t, err)
			pid, fp := scopeOf(b, t, id).Publication(b.ctx, t, b.db.Pool, "candidate")
			_, err = b.repo.CompleteThrough(b.ctx, b.db.Pool, &repo.CompleteThroughParams{Lease: lease, CandidatePublicationID: &pid, CandidateFingerprint: &fp})
			require.NoError(t, err)
			require.Equal(t, kfstype.RunStateSucceeded, b.rows(t, id).Attempt.RunState)
		})
	}

	// With TraceContexts each lease comes with its Start's trace context
	// (zero for an untraced Start), in the same order; without, none.
	t.Run("CarriesTraceContexts", func(t *testing.T) {
		b := setup(t)
		tc := kfstype.TraceContext{TraceParent: "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", TraceState: "kfs=1"}
		want := map[uuid.UUID]kfstype.TraceContext{}
		for _, traced := range []bool{true, false, true} {
			p := b.scope(t).StartParams()
			if traced {
				p.TraceContext = tc
			}
			res, err := b.repo.Start(b.ctx, b.db.Pool, p)
			require.NoError(t, err)
			want[res.Attempt.ID] = p.TraceContext
		}
		untraced := b.fetch(t, "worker-direct", 1)
		require.Len(t, untraced.Leased, 1)
		require.Zero(t, untraced.Leased[0].TraceContext, "a trace context not asked for")
		delete(want, untraced.Leased[0].Attempt.ID)

		res, err := b.repo.FetchLeases(b.ctx, b.db.Pool, &repo.FetchLeasesParams{WorkerID: "worker-direct", BatchSize: 10, TraceContexts: true})
		require.NoError(t, err)
		require.Len(t, res.Leased, 2)
		for _, la := range res.Leased {
			require.Equal(t, want[la.Attempt.ID], la.TraceContext, "attempt %s", la.Attempt.ID)
		}
	})

	t.Run("LeavesWhatIsNotDue", func(t *testing.T) {
		b := setup(t)
		var ids []uuid.UUID
		ids = append(ids, b.drv.Start(b.ctx, t, b.scope(t), &testfactory.StartOpts{Deferred: new(true)}).ID)
		for _, st := range []kfstype.RunState{kfstype.RunStateRunning, kfstype.RunStateSucceeded, kfstype.RunStateFailed, kfstype.RunStateCanceled, kfstype.RunStateSuperseded} {
			ids = append(ids, b.drv.InState(b.ctx, t, b.scope(t), st).ID)
		}
		// A row claimed by a relay whose lock holds.
		claimed := b.drv.Start(b.ctx, t, b.scope(t), nil)
		b.drv.Claim(b.ctx, t, claimed.ID)
		ids = append(ids, claimed.ID)
		before := b.snapshot(t, ids...)
		res := b.fetch(t, "worker-direct", 100)
		require.Empty(t, res.Leased)
		require.Empty(t, res.Exhausted)
		before.requireUnchanged(t, b)
	})

	t.Run("FailsExhaustedAttemptsOnce", func(t *testing.T) {
		b := setup(t)
		a := b.drv.Start(b.ctx, t, b.scope(t), &testfactory.StartOpts{MaxExecutionAttempts: new(int32(1))})
		first := b.fetch(t, "worker-a", 10)
		require.Len(t, first.Leased, 1)
		// worker-a is lost: at the lease's expiry the attempt is due again,
		// with no execution attempt left.
		b.clock.Advance(repo.LeaseDurationDefault)
		before := b.rows(t, a.ID)
		res := b.fetch(t, "worker-b", 10)
		require.Empty(t, res.Leased)
		require.Len(t, res.Exhausted, 1)
		after := b.rows(t, a.ID)
		require.Equal(t, kfstype.RunStateFailed, after.Attempt.RunState)
		require.Equal(t, kfstype.OutboxStatusDead, after.Outbox.Status)
		require.Equal(t, new(kfstype.ErrorCodeExecutionAttemptsExhausted), after.Attempt.LastErrorCode)
		require.Equal(t, before.Attempt.RowVersion+1, after.Attempt.RowVersion)
		require.Equal(t, after.Attempt, *res.Exhausted[0])
		// Failed once: the next fetch finds nothing, and the lost worker's
		// lease is fenced.
		again := b.snapshot(t, a.ID)
		res = b.fetch(t, "worker-b", 10)
		require.Empty(t, res.Leased)
		require.Empty(t, res.Exhausted)
		again.requireUnchanged(t, b)
		_, err := b.repo.Heartbeat(b.ctx, b.db.Pool, &repo.HeartbeatParams{Lease: first.Leased[0].Lease})
		require.ErrorIs(t, err, repo.ErrLeaseLost)
	})

	t.Run("FencesTheLostWorkerAfterARefetch", func(t *testing.T) {
		b := setup(t)
		a := b.drv.Start(b.ctx, t, b.scope(t), nil)
		first := b.fetch(t, "worker-a", 10)
		require.Len(t, first.Leased, 1)
		b.clock.Advance(repo.LeaseDurationDefault)
		before := b.rows(t, a.ID)
		second := b.requireFetchedOnly(t, b.fetch(t, "worker-b", 10), before, "worker-b")
		require.NotEqual(t, first.Leased[0].Lease.Token, second.Token)
		require.NotEqual(t, first.Leased[0].Attempt.QueueJobID, b.rows(t, a.ID).Attempt.QueueJobID, "a redelivery carries another job id")
		for name, call := range map[string]func() error{
			"Heartbeat": func() error {
				_, err := b.repo.Heartbeat(b.ctx, b.db.Pool, &repo.HeartbeatParams{Lease: first.Leased[0].Lease})
				return err
			},
			"Fail": func() error {
				_, err := b.repo.Fail(b.ctx, b.db.Pool, &repo.FailParams{Lease: first.Leased[0].Lease, ErrorCode: "X", ErrorMessage: "stale"})
				return err
			},
			"ScheduleRetry": func() error {
				_, err := b.repo.ScheduleRetry(b.ctx, b.db.Pool, &repo.ScheduleRetryParams{Lease: first.Leased[0].Lease, RetryDelay: time.Second, ErrorCode: "X", ErrorMessage: "stale"})
				return err
			},
		} {
			snap := b.snapshot(t, a.ID)
			require.ErrorIs(t, call(), repo.ErrLeaseLost, name)
			snap.requireUnchanged(t, b)
		}
	})

	t.Run("SkipsRowsOtherTransactionsHold", func(t *testing.T) {
		b := setup(t)
		held := b.drv.Start(b.ctx, t, b.scope(t), nil)
		free := b.drv.Start(b.ctx, t, b.scope(t), nil)
		// A cancel in an open transaction holds the attempt (attempt first,
		// then outbox, as every transition locks).
		tx, err := b.db.Pool.Begin(b.ctx)
		require.NoError(t, err)
		defer func() { _ = tx.Rollback(b.ctx) }()
		s := scopeOf(b, t, held.ID)
		_, err = b.repo.Cancel(b.ctx, tx, &repo.CancelParams{AttemptRef: repo.AttemptRef{TenantID: s.TenantID, KnowledgeSpaceID: s.KnowledgeSpaceID, AttemptID: held.ID}})
		require.NoError(t, err)
		before := b.rows(t, free.ID)
		b.requireFetchedOnly(t, b.fetch(t, "worker-direct", 10), before, "worker-direct")
		// The cancel commits: the attempt is never fetched.
		require.NoError(t, tx.Commit(b.ctx))
		canceled := b.snapshot(t, held.ID)
		require.Empty(t, b.fetch(t, "worker-direct", 10).Leased)
		canceled.requireUnchanged(t, b)
		require.Equal(t, kfstype.RunStateCanceled, canceled.rows[0].Attempt.RunState)
	})

	t.Run("AConcurrentFetchTakesTheNextRows", func(t *testing.T) {
		b := setup(t)
		// One tenant's backlog of 8; one fetch of 3 is still open.
		b.startN(t, "tenant-a", 8)
		tx, err := b.db.Pool.Begin(b.ctx)
		require.NoError(t, err)
		defer func() { _ = tx.Rollback(b.ctx) }()
		first, err := b.repo.FetchLeases(b.ctx, tx, &repo.FetchLeasesParams{WorkerID: "worker-1", BatchSize: 3})
		require.NoError(t, err)
		require.Len(t, first.Leased, 3)
		// The second fetch skips the held rows and still fills its batch
		// from the spare offers, in start order...
		second := b.fetch(t, "worker-2", 3)
		require.Len(t, second.Leased, 3)
		for _, a := range second.Leased {
			for _, h := range first.Leased {
				require.NotEqual(t, h.Attempt.ID, a.Attempt.ID)
				require.Less(t, h.Attempt.ID.String(), a.Attempt.ID.String(), "the held rows are the oldest")
			}
		}
		// ...and never more than PerTenant, spares included.
		res, err := b.repo.FetchLeases(b.ctx, b.db.Pool, &repo.FetchLeasesParams{WorkerID: "worker-3", BatchSize: 5, PerTenant: 1})
		require.NoError(t, err)
		require.Len(t, res.Leased, 1)
	})

	t.Run("InterleavesTenants", func(t *testing.T) {
		b := setup(t)
		// tenant-a has a backlog of 10 started first; b and c one each.
		b.startN(t, "tenant-a", 10)
		b.startN(t, "tenant-b", 1)
		b.startN(t, "tenant-c", 1)
		res := b.fetch(t, "worker-direct", 3)
		require.ElementsMatch(t, []string{"tenant-a", "tenant-b", "tenant-c"}, tenantsOf(res.Leased))
		require.Equal(t, "tenant-c", res.NextAfterTenant)
		// Round two: the backlog alone fills the batch.
		res = b.fetch(t, "worker-direct", 3)
		require.Equal(t, []string{"tenant-a", "tenant-a", "tenant-a"}, tenantsOf(res.Leased))
		// PerTenant bounds one tenant's share of a fetch.
		res, err := b.repo.FetchLeases(b.ctx, b.db.Pool, &repo.FetchLeasesParams{WorkerID: "w", BatchSize: 5, PerTenant: 2})
		require.NoError(t, err)
		require.Len(t, res.Leased, 2)
	})

	t.Run("OnlyAFullBatchEndsTheIdleRegistration", func(t *testing.T) {
		b := setup(t)
		registered := func(worker string) bool {
			var n int
			require.NoError(t, b.db.Pool.QueryRow(b.ctx, `SELECT count(*) FROM document_compilation_outbox_idle_listeners
				WHERE listener_id = $1`, worker).Scan(&n))
			return n == 1
		}
		register := func(worker string) {
			res, err := b.repo.OutboxListenerIdle(b.ctx, b.db.Pool, &repo.OutboxListenerIdleParams{ListenerID: worker, TTL: time.Minute})
			require.NoError(t, err)
			require.True(t, res.Registered)
		}
		b.startN(t, "tenant-a", 3)
		register("worker-direct")
		register("worker-other")
		// Fewer due rows than asked for: the worker keeps up and stays
		// registered, so the next commit wakes it.
		require.Len(t, b.fetch(t, "worker-direct", 5).Leased, 3)
		require.True(t, registered("worker-direct"))
		// A full batch: the worker is behind and fetches again at once;
		// its registration ends, and only its own.
		b.startN(t, "tenant-a", 2)
		// The two commits woke both workers, taking their registrations
		// (migration 0010); each registers again before it sleeps.
		register("worker-direct")
		register("worker-other")
		require.Len(t, b.fetch(t, "worker-direct", 2).Leased, 2)
		require.False(t, registered("worker-direct"))
		require.True(t, registered("worker-other"))
		// An empty fetch changes nothing.
		register("worker-direct")
		require.Empty(t, b.fetch(t, "worker-direct", 2).Leased)
		require.True(t, registered("worker-direct"))
	})

	t.Run("WalksTenantsRoundFromTheCursor", func(t *testing.T) {
		b := setup(t)
		for _, tenant := range []string{"t1", "t2", "t3"} {
			b.drv.Start(b.ctx, t, testfactory.NewScope(b.ctx, t, b.db.Pool, &testfactory.ScopeOpts{TenantID: new(tenant)}), nil)
		}
		res, err := b.repo.FetchLeases(b.ctx, b.db.Pool, &repo.FetchLeasesParams{WorkerID: "w", BatchSize: 1, AfterTenant: "t1"})
		require.NoError(t, err)
		require.Equal(t, []string{"t2"}, tenantsOf(res.Leased))
		res, err = b.repo.FetchLeases(b.ctx, b.db.Pool, &repo.FetchLeasesParams{WorkerID: "w", BatchSize: 1, AfterTenant: "t3"})
		require.NoError(t, err)
		require.Equal(t, []string{"t1"}, tenantsOf(res.Leased), "the walk wraps")
		// MaxTenants bounds the walk: from t1, one tenant is t2 (nothing
		// due there now), two reach t3.
		res, err = b.repo.FetchLeases(b.ctx, b.db.Pool, &repo.FetchLeasesParams{WorkerID: "w", BatchSize: 5, AfterTenant: "t1", MaxTenants: 2})
		require.NoError(t, err)
		require.Equal(t, []string{"t3"}, tenantsOf(res.Leased))
	})

	t.Run("ReachesDueRowsPastMaxTenantsWithNothingDue", func(t *testing.T) {
		b := setup(t)
		// t1..t4 have only running attempts (nothing due); t0 a backlog.
		for _, tenant := range []string{"t1", "t2", "t3", "t4"} {
			b.drv.Running(b.ctx, t, testfactory.NewScope(b.ctx, t, b.db.Pool, &testfactory.ScopeOpts{TenantID: new(tenant)}), nil)
		}
		b.startN(t, "t0", 3)
		// The walk from t0 sees two tenants with nothing due. The tenant of
		// a due row comes after them, so the fetch leases and the cursor
		// moves; walking only, every fetch from t0 came back empty and the
		// cursor never passed t1..t4.
		after := "t0"
		for _, want := range []int{2, 1} {
			res, err := b.repo.FetchLeases(b.ctx, b.db.Pool, &repo.FetchLeasesParams{WorkerID: "w", BatchSize: 2, AfterTenant: after, MaxTenants: 2})
			require.NoError(t, err)
			require.Len(t, res.Leased, want)
			require.Equal(t, []string{"t0"}, slices.Compact(tenantsOf(res.Leased)))
			require.Equal(t, "t0", res.NextAfterTenant)
			after = res.NextAfterTenant
		}
	})

	t.Run("ASecondTenantIsInterleavedOnceItsRowCommits", func(t *testing.T) {
		b := setup(t)
		// tenant-a alone has a backlog; tenant-b's first attempt is started
		// in a transaction still open.
		b.startN(t, "tenant-a", 10)
		tx, err := b.db.Pool.Begin(b.ctx)
		require.NoError(t, err)
		defer func() { _ = tx.Rollback(b.ctx) }()
		txDrv := &testfactory.Driver{Repo: b.repo, DB: tx}
		quiet := txDrv.Start(b.ctx, t, testfactory.NewScope(b.ctx, t, tx, &testfactory.ScopeOpts{TenantID: new("tenant-b")}), nil)
		// Uncommitted, the row is not there for the fetch: tenant-a fills it.
		res := b.fetch(t, "worker-direct", 3)
		require.Equal(t, []string{"tenant-a", "tenant-a", "tenant-a"}, tenantsOf(res.Leased))
		require.NoError(t, tx.Commit(b.ctx))
		// Committed, the next fetch interleaves it in round one, though
		// tenant-a's backlog alone would fill the batch.
		res, err = b.repo.FetchLeases(b.ctx, b.db.Pool, &repo.FetchLeasesParams{WorkerID: "worker-direct", BatchSize: 3, AfterTenant: res.NextAfterTenant})
		require.NoError(t, err)
		require.ElementsMatch(t, []string{"tenant-a", "tenant-a", "tenant-b"}, tenantsOf(res.Leased))
		require.Contains(t, idsOf(res.Leased), quiet.ID)
	})

	t.Run("StopsTheWalkWhenTheBatchHasATenantEach", func(t *testing.T) {
		b := setup(t)
		// Five tenants with due rows; a batch of two takes the first two
		// after the cursor, one each, and the next fetch the next two.
		for _, tenant := range []string{"t1", "t2", "t3", "t4", "t5"} {
			b.startN(t, tenant, 2)
		}
		after := ""
		for _, want := range [][]string{{"t1", "t2"}, {"t3", "t4"}, {"t1", "t5"}} {
			res, err := b.repo.FetchLeases(b.ctx, b.db.Pool, &repo.FetchLeasesParams{WorkerID: "w", BatchSize: 2, AfterTenant: after})
			require.NoError(t, err)
			require.ElementsMatch(t, want, tenantsOf(res.Leased))
			after = res.NextAfterTenant
		}
	})

	t.Run("RefusesBadInput", func(t *testing.T) {
		b := setup(t)
		for field, p := range map[string]*repo.FetchLeasesParams{
			"FetchLeasesParams": nil,
			"WorkerID":          {BatchSize: 1},
			"BatchSize":         {WorkerID: "w", BatchSize: repo.MaxBatchSize + 1},
			"LeaseDuration":     {WorkerID: "w", BatchSize: 1, LeaseDuration: -time.Second},
			"AfterTenant":       {WorkerID: "w", BatchSize: 1, AfterTenant: "bad\x00tenant"},
			"MaxTenants":        {WorkerID: "w", BatchSize: 1, MaxTenants: repo.MaxFetchTenants + 1},
			"PerTenant":         {WorkerID: "w", BatchSize: 1, PerTenant: -1},
		} {
			_, err := b.repo.FetchLeases(b.ctx, b.db.Pool, p)
			requireInputError(t, err, field)
		}
	})
}

func tenantsOf(as []*repo.LeasedAttempt) []string {
	out := make([]string, len(as))
	for i, a := range as {
		out[i] = a.Attempt.TenantID
	}
	return out
}

// scopeOf is the attempt's tenant and space.
func scopeOf(b *testBundle, t *testing.T, id uuid.UUID) *testfactory.Scope {
	t.Helper()
	a := b.rows(t, id).Attempt
	return &testfactory.Scope{TenantID: a.TenantID, KnowledgeSpaceID: a.KnowledgeSpaceID, DocumentAssetID: a.DocumentAssetID, DocumentVersion: a.DocumentVersion}
}

// insertAsset adds the scope's document asset version to its space.
func insertAsset(b *testBundle, t *testing.T, s *testfactory.Scope) {
	t.Helper()
	_, err := b.db.Pool.Exec(b.ctx, `INSERT INTO document_assets
		(id, knowledge_space_id, filename, mime_type, object_key, sha256, size_bytes, version)
		VALUES ($1, $2, 'doc.pdf', 'application/pdf', $3, repeat('0', 64), 1024, $4)`,
		s.DocumentAssetID, s.KnowledgeSpaceID, fmt.Sprintf("objects/%s", s.DocumentAssetID), s.DocumentVersion)
	require.NoError(t, err)
}

func idsOf(as []*repo.LeasedAttempt) []uuid.UUID {
	out := make([]uuid.UUID, len(as))
	for i, a := range as {
		out[i] = a.Attempt.ID
	}
	return out
}
