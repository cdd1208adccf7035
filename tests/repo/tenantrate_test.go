package repo_test

import (
	"context"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"

	"github.com/knowledgefs/kfsdb/kfstype"
	"github.com/knowledgefs/kfsdb/repo"
	"github.com/knowledgefs/kfsdb/tests/testfactory"
)

// Per-tenant rates and pauses (issue 41, item 4; migration 0011). Each
// subtest names the mutation of db/queries/direct_delivery.sql (or
// tenant_limits.sql) it was seen to catch.

// leasesOf counts res's leases of tenant.
func leasesOf(res *repo.FetchLeasesResult, tenant string) int {
	n := 0
	for _, la := range res.Leased {
		if la.Attempt.TenantID == tenant {
			n++
		}
	}
	return n
}

// setRate limits tenant to rate leases per second, burst at once.
func (b *testBundle) setRate(t *testing.T, tenant string, rate float64, burst int32) {
	t.Helper()
	require.NoError(t, b.repo.SetTenantRate(b.ctx, b.db.Pool, &repo.SetTenantRateParams{TenantID: tenant, Rate: rate, Burst: burst}))
}

// limitOf reads tenant's limits at the repo's clock.
func (b *testBundle) limitOf(t *testing.T, tenant string) *repo.TenantLimit {
	t.Helper()
	l, err := b.repo.GetTenantLimit(b.ctx, b.db.Pool, &repo.GetTenantLimitParams{TenantID: tenant})
	require.NoError(t, err)
	return l
}

func TestTenantRates(t *testing.T) {
	t.Parallel()

	// A token bucket of 3, refilled at 2 per second, by the repo's clock:
	// every fetch leases exactly what a model of the bucket (in
	// thousandths of a token: exact) says, and the tenant beside it the
	// rest of the batch. Over every window of fetch times the limited
	// tenant got at most 2·t + 3.
	// Mutations caught: no debit in stamped (the second fetch leases 3
	// again); tokens not refilled (the third fetch leases 0); refill from
	// the snapshot's row without least(burst) (the 5 s step leases 10).
	t.Run("LeasesAtMostRateTimesTPlusBurst", func(t *testing.T) {
		b := setup(t)
		const rate, burst, batch = 2, 3, 10
		b.startN(t, "limited", 40)
		b.startN(t, "free", 60)
		b.setRate(t, "limited", rate, burst)
		milli := burst * 1000 // the model's bucket
		limitedLeft, freeLeft := 40, 60
		var times []time.Duration // the limited tenant's leases, by fetch time
		elapsed := time.Duration(0)
		for _, step := range []time.Duration{0, 400 * time.Millisecond, 100 * time.Millisecond, 1300 * time.Millisecond,
			250 * time.Millisecond, 250 * time.Millisecond, 5 * time.Second, 10 * time.Millisecond, 490 * time.Millisecond,
			700 * time.Millisecond, time.Millisecond, 999 * time.Millisecond, 3 * time.Second, 0, 1500 * time.Millisecond} {
			b.clock.Advance(step)
			elapsed += step
			milli = min(burst*1000, milli+rate*int(step/time.Millisecond))
			want := min(milli/1000, limitedLeft)
			res := b.fetch(t, "w", batch)
			got := leasesOf(res, "limited")
			require.Equal(t, want, got, "limited leases at %s", elapsed)
			require.Equal(t, min(batch-got, freeLeft), leasesOf(res, "free"), "the unlimited tenant takes the rest of the batch at %s", elapsed)
			milli -= got * 1000
			limitedLeft -= got
			freeLeft -= leasesOf(res, "free")
			for range got {
				times = append(times, elapsed)
			}
			require.InDelta(t, float64(milli)/1000, b.limitOf(t, "limited").Tokens, 1e-9, "the bucket at %s", elapsed)
		}
		for i := range times {
			for j := i; j < len(times); j++ {
				window := (times[j] - times[i]).Seconds()
				require.LessOrEqual(t, float64(j-i+1), rate*window+burst, "leases %d..%d in %.3f s", i, j, window)
			}
		}
		require.Greater(t, len(times), burst, "the bucket refilled")
	})

	// Rates are exact decimals (NUMERIC): at 0.3 per second, 8 s give 2.4
	// tokens (2 leases, 0.4 left) and 2 s more exactly one. Mutation
	// caught: the bucket in float8 (DOUBLE PRECISION columns and
	// function), where 0.3 * 8 - 2 + 0.3 * 2 is 0.9999999999999999 and the
	// last fetch leases nothing.
	t.Run("FractionalRateIsExact", func(t *testing.T) {
		b := setup(t)
		b.startN(t, "slow", 10)
		b.setRate(t, "slow", 0.3, 5)
		require.Equal(t, 5, leasesOf(b.fetch(t, "w", 10), "slow"))
		b.clock.Advance(8 * time.Second)
		require.Equal(t, 2, leasesOf(b.fetch(t, "w", 10), "slow"))
		b.clock.Advance(1999 * time.Millisecond)
		require.Zero(t, leasesOf(b.fetch(t, "w", 10), "slow"))
		require.InDelta(t, 0.9997, b.limitOf(t, "slow").Tokens, 1e-12)
		b.clock.Advance(time.Millisecond)
		require.Equal(t, 1, leasesOf(b.fetch(t, "w", 10), "slow"))
	})

	// A fetch whose now is behind the bucket's time (a transaction that
	// started before another fetch committed) refills nothing and leaves
	// the bucket's time where it is, so no second is refilled twice.
	// Mutations caught: tokens_at = now in stamped (the bucket reads 5 at
	// the end instead of 2.5); no greatest(0, …) in the refill (the late
	// fetch sees -2 tokens and leases nothing).
	t.Run("ALateFetchRefillsNothingTwice", func(t *testing.T) {
		b := setup(t)
		b.startN(t, "limited", 20)
		b.setRate(t, "limited", 1, 5)
		t0 := b.clock.Now()
		require.Equal(t, 5, leasesOf(b.fetch(t, "w", 5), "limited"))
		b.clock.Advance(10 * time.Second)
		require.Equal(t, 2, leasesOf(b.fetch(t, "w", 2), "limited"), "refilled to 5, 3 left")
		late := repo.New(&repo.Config{Clock: testfactory.ClockAt(t0.Add(5 * time.Second))})
		res, err := late.FetchLeases(b.ctx, b.db.Pool, &repo.FetchLeasesParams{WorkerID: "late", BatchSize: 1})
		require.NoError(t, err)
		require.Equal(t, 1, leasesOf(res, "limited"), "3 tokens, none refilled")
		b.clock.Advance(500 * time.Millisecond)
		require.InDelta(t, 2.5, b.limitOf(t, "limited").Tokens, 1e-9, "2 left at t0+10s, refilled from there")
	})

	// A cap and a rate together: the smaller of the free places and the
	// whole tokens. Mutation caught: least() of the cap alone (4 leased).
	t.Run("CapAndRateTogether", func(t *testing.T) {
		b := setup(t)
		b.startN(t, "both", 10)
		b.setRate(t, "both", 1, 4)
		require.NoError(t, b.repo.SetTenantLimit(b.ctx, b.db.Pool, &repo.SetTenantLimitParams{TenantID: "both", MaxRunning: 2}))
		require.Equal(t, 2, leasesOf(b.fetch(t, "w", 10), "both"), "the cap")
		require.NoError(t, b.repo.SetTenantLimit(b.ctx, b.db.Pool, &repo.SetTenantLimitParams{TenantID: "both", MaxRunning: 8}))
		require.Equal(t, 2, leasesOf(b.fetch(t, "w", 10), "both"), "the 2 tokens left")
		require.Zero(t, leasesOf(b.fetch(t, "w", 10), "both"))
		require.NoError(t, b.repo.RemoveTenantLimit(b.ctx, b.db.Pool, &repo.RemoveTenantLimitParams{TenantID: "both"}))
		l := b.limitOf(t, "both")
		require.Zero(t, l.MaxRunning)
		require.Equal(t, 1.0, l.Rate, "lifting the cap keeps the rate")
	})

	// Changing a rate keeps the bucket (refilled at the old rate, cut to
	// the new burst); lifting the last limit deletes the row.
	t.Run("ChangesAndLifts", func(t *testing.T) {
		b := setup(t)
		b.startN(t, "t", 20)
		b.setRate(t, "t", 1, 5)
		require.Equal(t, 5, leasesOf(b.fetch(t, "w", 10), "t"))
		b.clock.Advance(2 * time.Second)
		b.setRate(t, "t", 10, 3)
		l := b.limitOf(t, "t")
		require.Equal(t, repo.TenantLimit{TenantID: "t", Rate: 10, Burst: 3, Tokens: 2}, *l, "2 refilled at 1/s, not a full bucket")
		require.Equal(t, 2, leasesOf(b.fetch(t, "w", 10), "t"))
		b.clock.Advance(time.Second)
		require.Equal(t, 3, leasesOf(b.fetch(t, "w", 10), "t"), "10/s, cut to the burst")

		require.NoError(t, b.repo.RemoveTenantRate(b.ctx, b.db.Pool, &repo.RemoveTenantRateParams{TenantID: "t"}))
		require.ErrorIs(t, b.repo.RemoveTenantRate(b.ctx, b.db.Pool, &repo.RemoveTenantRateParams{TenantID: "t"}), repo.ErrNotFound)
		_, err := b.repo.GetTenantLimit(b.ctx, b.db.Pool, &repo.GetTenantLimitParams{TenantID: "t"})
		require.ErrorIs(t, err, repo.ErrNotFound, "the row went with its last limit")
		require.Len(t, b.fetch(t, "w", 100).Leased, 10)
	})

	// An open transaction holds the tenant's row (an operator's change, a
	// fetch in flight): a fetch skips the tenant at once, never waits, and
	// changes nothing of it; once the row is free it is served. Mutation
	// caught: FOR UPDATE without SKIP LOCKED (the fetch waits and the
	// context ends it).
	t.Run("SkipsATenantWhoseRowIsHeldWithoutWaiting", func(t *testing.T) {
		b := setup(t)
		b.startN(t, "limited", 3)
		b.startN(t, "free", 3)
		b.setRate(t, "limited", 100, 10)
		tx, err := b.db.Pool.Begin(b.ctx)
		require.NoError(t, err)
		defer func() { _ = tx.Rollback(b.ctx) }()
		_, err = tx.Exec(b.ctx, `SELECT 1 FROM document_compilation_tenant_limits WHERE tenant_id = 'limited' FOR UPDATE`)
		require.NoError(t, err)
		before := b.limitOf(t, "limited")
		ctx, cancel := context.WithTimeout(b.ctx, 10*time.Second)
		defer cancel()
		res, err := b.repo.FetchLeases(ctx, b.db.Pool, &repo.FetchLeasesParams{WorkerID: "w", BatchSize: 10})
		require.NoError(t, err, "the fetch must not wait for the row")
		require.Equal(t, []string{"free", "free", "free"}, tenantsOf(res.Leased))
		require.Equal(t, before, b.limitOf(t, "limited"))
		require.NoError(t, tx.Commit(b.ctx))
		require.Equal(t, 3, leasesOf(b.fetch(t, "w", 10), "limited"))
	})

	// While one fetch's transaction holds the bucket it has spent from,
	// another skips the tenant rather than spend the same tokens; after
	// the commit the next one finds what was left. Mutation caught:
	// quotas reading the bucket from the snapshot for a row it did not
	// lock (the second fetch leases 2).
	t.Run("AFetchInFlightHoldsTheBucket", func(t *testing.T) {
		b := setup(t)
		b.startN(t, "limited", 5)
		b.setRate(t, "limited", 0.001, 2)
		tx, err := b.db.Pool.Begin(b.ctx)
		require.NoError(t, err)
		defer func() { _ = tx.Rollback(b.ctx) }()
		first, err := b.repo.FetchLeases(b.ctx, tx, &repo.FetchLeasesParams{WorkerID: "w1", BatchSize: 1})
		require.NoError(t, err)
		require.Len(t, first.Leased, 1)
		require.Empty(t, b.fetch(t, "w2", 10).Leased)
		require.NoError(t, tx.Commit(b.ctx))
		require.Len(t, b.fetch(t, "w2", 10).Leased, 1, "1 of 2 tokens left")
		require.Empty(t, b.fetch(t, "w2", 10).Leased)
	})

	t.Run("ListsAndRefuses", func(t *testing.T) {
		b := setup(t)
		b.setRate(t, "r", 2.5, 7)
		reason := "billing"
		res, err := b.repo.PauseTenant(b.ctx, b.db.Pool, &repo.PauseTenantParams{TenantID: "p", Reason: &reason})
		require.NoError(t, err)
		require.False(t, res.AlreadyPaused)
		require.NoError(t, b.repo.SetTenantLimit(b.ctx, b.db.Pool, &repo.SetTenantLimitParams{TenantID: "c", MaxRunning: 3}))
		got, err := b.repo.ListTenantLimits(b.ctx, b.db.Pool, &repo.ListTenantLimitsParams{})
		require.NoError(t, err)
		at := b.clock.Now()
		require.Equal(t, []repo.TenantLimit{
			{TenantID: "c", MaxRunning: 3},
			{TenantID: "p", PausedAt: &at, PauseReason: "billing"},
			{TenantID: "r", Rate: 2.5, Burst: 7, Tokens: 7},
		}, normalized(got))
		require.True(t, got[1].Paused())
		require.False(t, got[2].Paused())
		// A reason is cut and cleaned, as Cancel's is; "" is none.
		for reason, want := range map[string]string{
			"": "", "a\x00b\xff": "a\uFFFDb\uFFFD", strings.Repeat("é", repo.MaxPauseReasonLength+1): strings.Repeat("é", repo.MaxPauseReasonLength),
		} {
			_, err := b.repo.PauseTenant(b.ctx, b.db.Pool, &repo.PauseTenantParams{TenantID: "reason", Reason: &reason})
			require.NoError(t, err)
			require.Equal(t, want, b.limitOf(t, "reason").PauseReason)
			require.NoError(t, b.repo.ResumeTenant(b.ctx, b.db.Pool, &repo.ResumeTenantParams{TenantID: "reason"}))
		}

		long := strings.Repeat("é", repo.MaxTenantIDLength+1)
		for field, err := range map[string]error{
			"SetTenantRateParams": b.repo.SetTenantRate(b.ctx, b.db.Pool, nil),
			"TenantID":            b.repo.SetTenantRate(b.ctx, b.db.Pool, &repo.SetTenantRateParams{Rate: 1, Burst: 1}),
			"Rate":                b.repo.SetTenantRate(b.ctx, b.db.Pool, &repo.SetTenantRateParams{TenantID: "x", Burst: 1}),
			"Burst":               b.repo.SetTenantRate(b.ctx, b.db.Pool, &repo.SetTenantRateParams{TenantID: "x", Rate: 1}),
		} {
			requireInputError(t, err, field)
		}
		for _, rate := range []float64{-1, 0, math.NaN(), math.Inf(1), math.Inf(-1), repo.MaxTenantRate * 2} {
			requireInputError(t, b.repo.SetTenantRate(b.ctx, b.db.Pool, &repo.SetTenantRateParams{TenantID: "x", Rate: rate, Burst: 1}), "Rate")
		}
		for _, burst := range []int32{-1, 0, repo.MaxTenantBurst + 1} {
			requireInputError(t, b.repo.SetTenantRate(b.ctx, b.db.Pool, &repo.SetTenantRateParams{TenantID: "x", Rate: 1, Burst: burst}), "Burst")
		}
		for _, tenant := range []string{"", long, "a\x00b", "\xff"} {
			requireInputError(t, b.repo.SetTenantRate(b.ctx, b.db.Pool, &repo.SetTenantRateParams{TenantID: tenant, Rate: 1, Burst: 1}), "TenantID")
			requireInputError(t, b.repo.RemoveTenantRate(b.ctx, b.db.Pool, &repo.RemoveTenantRateParams{TenantID: tenant}), "TenantID")
			_, err := b.repo.PauseTenant(b.ctx, b.db.Pool, &repo.PauseTenantParams{TenantID: tenant})
			requireInputError(t, err, "TenantID")
			requireInputError(t, b.repo.ResumeTenant(b.ctx, b.db.Pool, &repo.ResumeTenantParams{TenantID: tenant}), "TenantID")
			_, err = b.repo.GetTenantLimit(b.ctx, b.db.Pool, &repo.GetTenantLimitParams{TenantID: tenant})
			requireInputError(t, err, "TenantID")
		}
		// Nothing changed.
		after, err := b.repo.ListTenantLimits(b.ctx, b.db.Pool, &repo.ListTenantLimitsParams{})
		require.NoError(t, err)
		require.Equal(t, got, normalized(after))
		// The database's checks hold the same rules for a writer that is
		// not repo.
		for _, sql := range []string{
			`INSERT INTO document_compilation_tenant_limits (tenant_id, leases_per_second, burst, tokens, tokens_at, updated_at) VALUES ('y', 0, 1, 1, now(), now())`,
			`INSERT INTO document_compilation_tenant_limits (tenant_id, leases_per_second, burst, tokens, tokens_at, updated_at) VALUES ('y', 1, 0, 0, now(), now())`,
			`INSERT INTO document_compilation_tenant_limits (tenant_id, leases_per_second, burst, tokens, tokens_at, updated_at) VALUES ('y', 1, 2, 3, now(), now())`,
			`INSERT INTO document_compilation_tenant_limits (tenant_id, leases_per_second, burst, updated_at) VALUES ('y', 1, 2, now())`,
			`INSERT INTO document_compilation_tenant_limits (tenant_id, pause_reason, max_running, updated_at) VALUES ('y', 'why', 1, now())`,
			`INSERT INTO document_compilation_tenant_limits (tenant_id, updated_at) VALUES ('y', now())`,
			`INSERT INTO document_compilation_tenant_limits (tenant_id, max_running, updated_at) VALUES ('y', 0, now())`,
		} {
			_, err := b.db.Pool.Exec(b.ctx, sql)
			var pgErr *pgconn.PgError
			require.ErrorAs(t, err, &pgErr, sql)
			require.Equal(t, "23514", pgErr.Code, "a check violation: %s", sql)
		}
	})
}

// normalized is limits with their pause times in UTC, for comparison.
func normalized(ls []repo.TenantLimit) []repo.TenantLimit {
	for i := range ls {
		if ls[i].PausedAt != nil {
			ls[i].PausedAt = new(ls[i].PausedAt.UTC())
		}
	}
	return ls
}

func TestTenantPauses(t *testing.T) {
	t.Parallel()

	// A paused tenant with attempts due in every way a fetch takes them
	// (started, queued past its visibility, running past its lease, a
	// retry at its time, and one with no execution attempts left) gets
	// nothing, and not one of its rows changes; the tenant beside it is
	// served. Resumed, all of them are (the exhausted one failed).
	// Mutation caught: the walk's probe without paused_at (the batch of
	// one comes back empty: the paused tenant took its place); both it
	// and quotas' c.paused (everything is leased).
	t.Run("NoLeasesRowsUntouchedUntilResumed", func(t *testing.T) {
		b := setup(t)
		scope := func() *testfactory.Scope {
			return testfactory.NewScope(b.ctx, t, b.db.Pool, &testfactory.ScopeOpts{TenantID: new("paused")})
		}
		var ids []uuid.UUID
		ids = append(ids, b.drv.InState(b.ctx, t, scope(), kfstype.RunStateDispatchPending).ID)
		ids = append(ids, b.drv.InState(b.ctx, t, scope(), kfstype.RunStateQueued).ID)
		ids = append(ids, b.drv.InState(b.ctx, t, scope(), kfstype.RunStateRunning).ID)
		ids = append(ids, b.drv.InState(b.ctx, t, scope(), kfstype.RunStateRetryWait).ID)
		exhausted, _, _ := b.drv.Running(b.ctx, t, scope(), &testfactory.RunningOpts{Start: &testfactory.StartOpts{MaxExecutionAttempts: new(int32(1))}})
		ids = append(ids, exhausted.ID)
		b.startN(t, "zfree", 2)
		// Past every lease, visibility and retry time.
		b.clock.Advance(repo.LeaseDurationDefault + time.Hour)

		res, err := b.repo.PauseTenant(b.ctx, b.db.Pool, &repo.PauseTenantParams{TenantID: "paused"})
		require.NoError(t, err)
		require.False(t, res.AlreadyPaused)
		again, err := b.repo.PauseTenant(b.ctx, b.db.Pool, &repo.PauseTenantParams{TenantID: "paused", Reason: new("later")})
		require.NoError(t, err)
		require.True(t, again.AlreadyPaused)
		require.Empty(t, b.limitOf(t, "paused").PauseReason, "the first pause stays as it was")
		before := make([]*testfactory.Rows, len(ids))
		for i, id := range ids {
			before[i] = testfactory.ReadRows(b.ctx, t, b.db.Pool, id)
		}

		// The walk from the first tenant passes the paused one: a batch of
		// one goes to the tenant after it.
		for _, batch := range []int32{1, 100} {
			got := b.fetch(t, "w", batch)
			require.Empty(t, got.Exhausted)
			require.Equal(t, []string{"zfree"}, tenantsOf(got.Leased))
		}
		require.Empty(t, b.fetch(t, "w", 100).Leased, "nothing but the paused tenant's is due")
		for i, id := range ids {
			require.Equal(t, before[i], testfactory.ReadRows(b.ctx, t, b.db.Pool, id), "a paused tenant's rows are not touched")
		}

		require.NoError(t, b.repo.ResumeTenant(b.ctx, b.db.Pool, &repo.ResumeTenantParams{TenantID: "paused"}))
		require.ErrorIs(t, b.repo.ResumeTenant(b.ctx, b.db.Pool, &repo.ResumeTenantParams{TenantID: "paused"}), repo.ErrNotFound)
		got := b.fetch(t, "w", 100)
		require.ElementsMatch(t, ids[:4], idsOf(got.Leased))
		require.Len(t, got.Exhausted, 1)
		require.Equal(t, exhausted.ID, got.Exhausted[0].ID)
	})

	// The walk passes the paused tenant, and the oldest due row, which
	// brings a tenant the walk did not reach, is the paused tenant's: its
	// locked row says paused. Mutation caught: quotas without c.paused
	// (the fetch leases the paused tenant's attempts).
	t.Run("ViaTheOldestDueRow", func(t *testing.T) {
		b := setup(t)
		// q and r have running attempts only (the driver's claim takes
		// every due row: they go first).
		for _, tenant := range []string{"q", "r"} {
			b.drv.Running(b.ctx, t, testfactory.NewScope(b.ctx, t, b.db.Pool, &testfactory.ScopeOpts{TenantID: new(tenant)}), nil)
		}
		b.startN(t, "p", 3)
		_, err := b.repo.PauseTenant(b.ctx, b.db.Pool, &repo.PauseTenantParams{TenantID: "p"})
		require.NoError(t, err)
		res, err := b.repo.FetchLeases(b.ctx, b.db.Pool, &repo.FetchLeasesParams{WorkerID: "w", BatchSize: 5, AfterTenant: "p", MaxTenants: 2})
		require.NoError(t, err)
		require.Empty(t, res.Leased)
		require.Empty(t, res.Exhausted)
		require.Equal(t, "r", res.NextAfterTenant, "the last tenant walked")
		// Resumed, the oldest due row brings it.
		require.NoError(t, b.repo.ResumeTenant(b.ctx, b.db.Pool, &repo.ResumeTenantParams{TenantID: "p"}))
		res, err = b.repo.FetchLeases(b.ctx, b.db.Pool, &repo.FetchLeasesParams{WorkerID: "w", BatchSize: 5, AfterTenant: "p", MaxTenants: 2})
		require.NoError(t, err)
		require.Equal(t, []string{"p", "p", "p"}, tenantsOf(res.Leased))
	})

	// Two paused tenants hold the oldest due rows, and a fetch walks only
	// them (MaxTenants 2): it leases nothing, and its cursor moves to the
	// last tenant it walked, so the next fetch reaches the tenant past
	// them. Mutation caught: the walk_end row left out (or ignored by
	// repo): every fetch from "" walks the same two and comes back empty.
	t.Run("TheCursorWalksOnPastTenantsItCannotServe", func(t *testing.T) {
		b := setup(t)
		b.startN(t, "t1", 2)
		b.startN(t, "t2", 2)
		b.startN(t, "t3", 2)
		for _, tenant := range []string{"t1", "t2"} {
			_, err := b.repo.PauseTenant(b.ctx, b.db.Pool, &repo.PauseTenantParams{TenantID: tenant})
			require.NoError(t, err)
		}
		res, err := b.repo.FetchLeases(b.ctx, b.db.Pool, &repo.FetchLeasesParams{WorkerID: "w", BatchSize: 1, MaxTenants: 2})
		require.NoError(t, err)
		require.Empty(t, res.Leased)
		require.Equal(t, "t2", res.NextAfterTenant)
		res, err = b.repo.FetchLeases(b.ctx, b.db.Pool, &repo.FetchLeasesParams{WorkerID: "w", BatchSize: 1, MaxTenants: 2, AfterTenant: res.NextAfterTenant})
		require.NoError(t, err)
		require.Equal(t, []string{"t3"}, tenantsOf(res.Leased))
	})

	// A pause that is not committed yet holds the tenant's row: fetches
	// skip the tenant meanwhile (they do not wait), and serve it when the
	// pause rolls back.
	t.Run("AnUncommittedPause", func(t *testing.T) {
		b := setup(t)
		b.startN(t, "p", 2)
		tx, err := b.db.Pool.Begin(b.ctx)
		require.NoError(t, err)
		defer func() { _ = tx.Rollback(b.ctx) }()
		require.NoError(t, b.repo.SetTenantLimit(b.ctx, b.db.Pool, &repo.SetTenantLimitParams{TenantID: "p", MaxRunning: 10}))
		_, err = b.repo.PauseTenant(b.ctx, tx, &repo.PauseTenantParams{TenantID: "p"})
		require.NoError(t, err)
		require.Empty(t, b.fetch(t, "w", 10).Leased)
		require.NoError(t, tx.Rollback(b.ctx))
		require.Len(t, b.fetch(t, "w", 10).Leased, 2)
	})

	// A pause keeps the tenant's other limits, and resuming keeps them
	// too; a row that paused alone goes with the pause.
	t.Run("KeepsOtherLimits", func(t *testing.T) {
		b := setup(t)
		require.NoError(t, b.repo.SetTenantLimit(b.ctx, b.db.Pool, &repo.SetTenantLimitParams{TenantID: "c", MaxRunning: 2}))
		for _, tenant := range []string{"c", "alone"} {
			_, err := b.repo.PauseTenant(b.ctx, b.db.Pool, &repo.PauseTenantParams{TenantID: tenant})
			require.NoError(t, err)
		}
		require.NoError(t, b.repo.RemoveTenantLimit(b.ctx, b.db.Pool, &repo.RemoveTenantLimitParams{TenantID: "c"}))
		require.True(t, b.limitOf(t, "c").Paused(), "lifting the cap keeps the pause")
		require.NoError(t, b.repo.SetTenantLimit(b.ctx, b.db.Pool, &repo.SetTenantLimitParams{TenantID: "c", MaxRunning: 2}))
		for _, tenant := range []string{"c", "alone"} {
			require.NoError(t, b.repo.ResumeTenant(b.ctx, b.db.Pool, &repo.ResumeTenantParams{TenantID: tenant}))
		}
		got, err := b.repo.ListTenantLimits(b.ctx, b.db.Pool, &repo.ListTenantLimitsParams{})
		require.NoError(t, err)
		require.Equal(t, []repo.TenantLimit{{TenantID: "c", MaxRunning: 2}}, got)
	})
}
