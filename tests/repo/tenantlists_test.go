package repo_test

import (
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/knowledgefs/kfsdb/repo"
	"github.com/knowledgefs/kfsdb/tests/testfactory"
)

// fetchWith runs FetchLeases with p and checks the invariants of every
// attempt it leased or failed.
func (b *testBundle) fetchWith(t *testing.T, p *repo.FetchLeasesParams) *repo.FetchLeasesResult {
	t.Helper()
	res, err := b.repo.FetchLeases(b.ctx, b.db.Pool, p)
	require.NoError(t, err)
	for _, la := range res.Leased {
		testfactory.RequireInvariants(b.ctx, t, b.db.Pool, la.Attempt.ID)
	}
	return res
}

// startBulk starts n attempts of tenant in one space, eight Starts at a
// time (startN's one at a time is slow for hundreds).
func (b *testBundle) startBulk(t *testing.T, tenant string, n int) {
	t.Helper()
	testfactory.StartAll(b.ctx, t, b.repo, b.db.Pool, testfactory.SeedTenantDocuments(b.ctx, t, b.db.Pool, tenant, n), 0)
}

// TestFetchLeasesTenantLists: FetchLeasesParams.Tenants (an include list)
// and ExcludeTenants, inside the one statement. The mutation each subtest
// was seen to fail on is named in its comment.
func TestFetchLeasesTenantLists(t *testing.T) {
	t.Parallel()

	// Mutation: the include list not passed to the statement (nil) — b's
	// rows are leased by the first fetch.
	t.Run("AnIncludeListServesOnlyItsTenants", func(t *testing.T) {
		b := setup(t)
		for _, tenant := range []string{"a", "b", "c"} {
			b.startN(t, tenant, 3)
		}
		res := b.fetchWith(t, &repo.FetchLeasesParams{WorkerID: "w", BatchSize: 100, Tenants: []string{"c", "a"}})
		require.ElementsMatch(t, []string{"a", "a", "a", "c", "c", "c"}, tenantsOf(res.Leased))
		// Nothing of theirs is left: the list's fetch takes nothing more,
		// and another list takes b's.
		require.Empty(t, b.fetchWith(t, &repo.FetchLeasesParams{WorkerID: "w", BatchSize: 100, Tenants: []string{"a", "c"}}).Leased)
		res = b.fetchWith(t, &repo.FetchLeasesParams{WorkerID: "w", BatchSize: 100, Tenants: []string{"b", "not-a-tenant"}})
		require.Equal(t, []string{"b", "b", "b"}, tenantsOf(res.Leased))
	})

	// Fairness among the included: the walk goes down the list (bytewise,
	// whatever order it was given in) from the cursor, a tenant each per
	// round, wrapping. Mutation: the list walked from its start every time
	// (the "wrapped" sort key dropped) — the second fetch takes t1 and t3
	// again.
	t.Run("AnIncludeListIsWalkedRoundFromTheCursor", func(t *testing.T) {
		b := setup(t)
		for _, tenant := range []string{"t1", "t2", "t3", "t4", "t5"} {
			b.startN(t, tenant, 2)
		}
		after := ""
		for _, want := range [][]string{{"t1", "t3"}, {"t1", "t5"}, {"t3", "t5"}} {
			res := b.fetchWith(t, &repo.FetchLeasesParams{WorkerID: "w", BatchSize: 2, AfterTenant: after, Tenants: []string{"t5", "t1", "t3"}})
			require.ElementsMatch(t, want, tenantsOf(res.Leased), "after %q", after)
			after = res.NextAfterTenant
		}
		require.Empty(t, b.fetchWith(t, &repo.FetchLeasesParams{WorkerID: "w", BatchSize: 2, AfterTenant: after, Tenants: []string{"t5", "t1", "t3"}}).Leased)
		// A backlog is interleaved round by round with the other included
		// tenants, as without a list.
		b.startN(t, "t3", 4)
		b.startN(t, "t5", 1)
		res := b.fetchWith(t, &repo.FetchLeasesParams{WorkerID: "w", BatchSize: 3, Tenants: []string{"t3", "t5"}})
		require.ElementsMatch(t, []string{"t3", "t3", "t5"}, tenantsOf(res.Leased))
	})

	// A list longer than MaxTenants is walked MaxTenants at a time: an
	// empty fetch hands back the last tenant walked as the next cursor, and
	// the due row of a tenant off the list (the due index's first) is not
	// offered. Mutations: the walk_end row removed (the cursor stays at ""
	// and every fetch walks t1, t2 again); the fallback's list check
	// removed (the first fetch leases other's row).
	t.Run("AnIncludeListLongerThanMaxTenantsMovesOn", func(t *testing.T) {
		b := setup(t)
		b.startN(t, "other", 2) // the oldest due rows: the due index's head
		b.clock.Advance(time.Second)
		b.startN(t, "t4", 1)
		list := []string{"t1", "t2", "t3", "t4"}
		res := b.fetchWith(t, &repo.FetchLeasesParams{WorkerID: "w", BatchSize: 4, MaxTenants: 2, Tenants: list})
		require.Empty(t, res.Leased)
		require.Equal(t, "t2", res.NextAfterTenant)
		res = b.fetchWith(t, &repo.FetchLeasesParams{WorkerID: "w", BatchSize: 4, MaxTenants: 2, Tenants: list, AfterTenant: res.NextAfterTenant})
		require.Equal(t, []string{"t4"}, tenantsOf(res.Leased))
		require.Equal(t, "t4", res.NextAfterTenant)
	})

	// Mutation: the probe run for an excluded tenant (the CASE on
	// nxt.excluded removed) — big's rows are leased.
	t.Run("AnExcludeListNeverServesExcludedTenants", func(t *testing.T) {
		b := setup(t)
		b.startN(t, "big", 5)
		b.startN(t, "s1", 1)
		b.startN(t, "s2", 2)
		p := &repo.FetchLeasesParams{WorkerID: "w", BatchSize: 100, ExcludeTenants: []string{"big", "nobody"}}
		require.ElementsMatch(t, []string{"s1", "s2", "s2"}, tenantsOf(b.fetchWith(t, p).Leased))
		require.Empty(t, b.fetchWith(t, p).Leased)
		require.Len(t, b.fetchWith(t, &repo.FetchLeasesParams{WorkerID: "w", BatchSize: 100}).Leased, 5, "without the list")
	})

	// Only excluded tenants have due rows (300 of them, at the head of the
	// due index): the fetch leases nothing, reads a bounded number of
	// buffers however many there are, and serves another tenant once it
	// has a due row. Mutations: the fallback searching the due index for
	// the first row of a tenant not excluded (the exclusion inside its
	// LIMIT 1 scans) — it reads every excluded due row (304 outbox rows);
	// the next-tenant descent filtering out excluded tenants inside its
	// LIMIT 1 — it reads all of big's index entries (606 attempt rows).
	t.Run("OnlyExcludedDueRowsCostLittleAndLeaseNothing", func(t *testing.T) {
		b := setup(t)
		pool, rec := recordingPool(t, b.ctx, b.db.URL)
		r := repo.New(&repo.Config{Clock: b.clock})
		// Running first: the driver's claim takes every due row.
		b.drv.Running(b.ctx, t, testfactory.NewScope(b.ctx, t, b.db.Pool, &testfactory.ScopeOpts{TenantID: new("quiet")}), nil)
		b.startBulk(t, "big", 300)
		_, err := b.db.Pool.Exec(b.ctx, "ANALYZE document_compilation_attempts, document_compilation_outbox")
		require.NoError(t, err)
		// MaxTenants 1: the walk passes big, looks at quiet (nothing due),
		// and stops there, so the due row after it is probed too.
		p := &repo.FetchLeasesParams{WorkerID: "w", BatchSize: 8, MaxTenants: 1, ExcludeTenants: []string{"big"}}
		res, err := r.FetchLeases(b.ctx, pool, p)
		require.NoError(t, err)
		require.Empty(t, res.Leased)
		require.Empty(t, res.Exhausted)
		require.Equal(t, "quiet", res.NextAfterTenant, "the walk's end")
		a := analyze(t, b.ctx, pool, rec.last["FetchLeases"])
		t.Logf("empty fetch beside 300 excluded due rows: %d buffers, %.2f ms, rows read %v", a.buffers, a.ms, a.rowsRead)
		// The walk's descents, quiet's one live attempt and its outbox
		// row, the due index's first row and its attempt: a handful (6
		// attempt and 2-4 outbox rows, 22 buffers, on PostgreSQL 17 and
		// 15).
		require.Less(t, a.rowsRead["document_compilation_outbox"], int64(20), "the fetch read past the excluded tenant's due rows")
		require.Less(t, a.rowsRead["document_compilation_attempts"], int64(20), "the fetch read the excluded tenant's attempts")
		require.Less(t, a.buffers, int64(150))
		// Another tenant's row comes due: the next fetch, from the cursor
		// the empty one returned, leases it.
		b.startN(t, "small", 1)
		p.AfterTenant = res.NextAfterTenant
		res, err = r.FetchLeases(b.ctx, pool, p)
		require.NoError(t, err)
		require.Equal(t, []string{"small"}, tenantsOf(res.Leased))
	})

	// Excluded tenants are passed without counting in MaxTenants, and an
	// empty fetch moves the cursor past tenants with nothing due, while an
	// excluded backlog heads the due index. Mutation: the walk_end row
	// removed — every fetch from "" walks big, h1 and h2, and s9 waits
	// forever.
	t.Run("ExcludedDueRowsDoNotHoldTheCursor", func(t *testing.T) {
		b := setup(t)
		// Running first: the driver's claim takes every due row.
		for _, tenant := range []string{"h1", "h2", "h3", "h4"} {
			b.drv.Running(b.ctx, t, testfactory.NewScope(b.ctx, t, b.db.Pool, &testfactory.ScopeOpts{TenantID: new(tenant)}), nil)
		}
		b.startN(t, "big", 3) // the due index's head
		b.clock.Advance(time.Second)
		b.startN(t, "s9", 1)
		after := ""
		var walked []string
		for range 3 {
			res := b.fetchWith(t, &repo.FetchLeasesParams{WorkerID: "w", BatchSize: 4, MaxTenants: 2, AfterTenant: after, ExcludeTenants: []string{"big"}})
			if len(res.Leased) > 0 {
				require.Equal(t, []string{"s9"}, tenantsOf(res.Leased))
				break
			}
			walked = append(walked, res.NextAfterTenant)
			after = res.NextAfterTenant
		}
		require.Equal(t, []string{"h2", "h4"}, walked)
	})

	// The canonical deployment: a source for one tenant (include) and one
	// for the rest (exclude), fetching at once, never lease each other's
	// tenants, and between them lease everything once. Mutation: the
	// exclude list not passed (nil) — the second source takes "big" rows.
	t.Run("DisjointListsNeverLeaseEachOthersTenants", func(t *testing.T) {
		b := setup(t)
		b.startBulk(t, "big", 60)
		rest := []string{"r1", "r2", "r3", "r4"}
		for _, tenant := range rest {
			b.startBulk(t, tenant, 15)
		}
		sides := []*repo.FetchLeasesParams{
			{WorkerID: "dedicated", BatchSize: 4, Tenants: []string{"big"}},
			{WorkerID: "fleet", BatchSize: 4, ExcludeTenants: []string{"big"}},
		}
		leased := make([][]string, len(sides))
		var wg sync.WaitGroup
		errs := make(chan error, len(sides))
		for i, p := range sides {
			wg.Go(func() {
				for empty := 0; empty < 3; {
					res, err := b.repo.FetchLeases(b.ctx, b.db.Pool, p)
					if err != nil {
						errs <- err
						return
					}
					p.AfterTenant = res.NextAfterTenant
					leased[i] = append(leased[i], tenantsOf(res.Leased)...)
					if len(res.Leased) == 0 {
						empty++
					}
				}
			})
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			require.NoError(t, err)
		}
		require.Len(t, leased[0], 60)
		require.Equal(t, []string{"big"}, slices.Compact(slices.Sorted(slices.Values(leased[0]))))
		require.Len(t, leased[1], 60)
		require.Equal(t, rest, slices.Compact(slices.Sorted(slices.Values(leased[1]))))
	})

	// A tenant's cap holds across sources with lists that both serve it:
	// fetching at once, round after round, they lease exactly its cap in
	// all. Mutation: the include walk's tenants given per_tenant as quota
	// whatever their limit — 10 leases of capped.
	t.Run("CapsHoldAcrossSourcesWithLists", func(t *testing.T) {
		b := setup(t)
		b.startBulk(t, "capped", 10)
		b.startBulk(t, "free", 10)
		b.startBulk(t, "other", 10)
		require.NoError(t, b.repo.SetTenantLimit(b.ctx, b.db.Pool, &repo.SetTenantLimitParams{TenantID: "capped", MaxRunning: 3}))
		sides := []*repo.FetchLeasesParams{
			{WorkerID: "a", BatchSize: 4, Tenants: []string{"capped", "free"}},
			{WorkerID: "b", BatchSize: 4, ExcludeTenants: []string{"other"}},
		}
		capped := make([]int, len(sides))
		var wg sync.WaitGroup
		errs := make(chan error, len(sides))
		for i, p := range sides {
			wg.Go(func() {
				for range 12 {
					res, err := b.repo.FetchLeases(b.ctx, b.db.Pool, p)
					if err != nil {
						errs <- err
						return
					}
					p.AfterTenant = res.NextAfterTenant
					for _, la := range res.Leased {
						if la.Attempt.TenantID == "capped" {
							capped[i]++
						}
						if la.Attempt.TenantID == "other" {
							errs <- fmt.Errorf("%s leased an excluded tenant's attempt", p.WorkerID)
						}
					}
				}
			})
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			require.NoError(t, err)
		}
		require.Equal(t, 3, capped[0]+capped[1], "capped leases in all (%v)", capped)
		var running int
		require.NoError(t, b.db.Pool.QueryRow(b.ctx, `SELECT count(*) FROM document_compilation_attempts
			WHERE tenant_id = 'capped' AND run_state = 'running'`).Scan(&running))
		require.Equal(t, 3, running)
	})

	// Mutation for each: the check removed from validator.tenantLists.
	t.Run("RefusesBadLists", func(t *testing.T) {
		b := setup(t)
		tooMany := make([]string, repo.MaxTenantList+1)
		for i := range tooMany {
			tooMany[i] = fmt.Sprintf("t%d", i)
		}
		for field, p := range map[string]*repo.FetchLeasesParams{
			"Tenants":           {Tenants: []string{}},
			"ExcludeTenants":    {Tenants: []string{"a"}, ExcludeTenants: []string{"b"}},
			"Tenants[1]":        {Tenants: []string{"a", ""}},
			"ExcludeTenants[2]": {ExcludeTenants: []string{"a", "b", "a"}},
			"ExcludeTenants[0]": {ExcludeTenants: []string{"bad\x00tenant"}},
		} {
			p.WorkerID, p.BatchSize = "w", 1
			_, err := b.repo.FetchLeases(b.ctx, b.db.Pool, p)
			requireInputError(t, err, field)
		}
		_, err := b.repo.FetchLeases(b.ctx, b.db.Pool, &repo.FetchLeasesParams{WorkerID: "w", BatchSize: 1, Tenants: tooMany})
		requireInputError(t, err, "Tenants")
		// An empty exclude list is no list.
		_, err = b.repo.FetchLeases(b.ctx, b.db.Pool, &repo.FetchLeasesParams{WorkerID: "w", BatchSize: 1, ExcludeTenants: []string{}})
		require.NoError(t, err)
	})
}
