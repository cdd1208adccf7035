package runtime_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/knowledgefs/kfsdb/kfstype"
	"github.com/knowledgefs/kfsdb/pgsource"
	"github.com/knowledgefs/kfsdb/repo"
	"github.com/knowledgefs/kfsdb/tests/testfactory"
	"github.com/knowledgefs/kfsdb/worker"
)

// tenantDocs seeds n documents of each tenant and starts them; it returns
// the documents and the attempt ids by tenant.
func (e *env) tenantDocs(t *testing.T, n int, tenants ...string) ([]testfactory.Document, map[string][]uuid.UUID) {
	t.Helper()
	var docs []testfactory.Document
	ids := map[string][]uuid.UUID{}
	for _, tenant := range tenants {
		d := testfactory.SeedTenantDocuments(e.ctx, t, e.pool, tenant, n)
		docs = append(docs, d...)
		ids[tenant] = e.startMany(t, d)
	}
	return docs, ids
}

// tenantRecorder is a handler that compiles every attempt and records the
// tenants it ran; with watched, it also counts in conc how many of that
// tenant's attempts run at once (conc may be shared between workers).
type tenantRecorder struct {
	cands   map[uuid.UUID]testfactory.Candidate
	watched string        // the tenant whose concurrency is tracked
	hold    time.Duration // how long each run of watched lasts
	conc    *concurrency

	mu      sync.Mutex
	tenants []string
}

// concurrency counts runs under way and the most at once.
type concurrency struct{ running, most atomic.Int32 }

func (c *concurrency) enter() {
	n := c.running.Add(1)
	for m := c.most.Load(); n > m && !c.most.CompareAndSwap(m, n); m = c.most.Load() {
	}
}

func (h *tenantRecorder) Work(ctx context.Context, job *worker.Job) error {
	h.mu.Lock()
	h.tenants = append(h.tenants, job.Attempt.TenantID)
	h.mu.Unlock()
	if h.conc != nil && job.Attempt.TenantID == h.watched {
		h.conc.enter()
		defer h.conc.running.Add(-1)
		time.Sleep(h.hold)
	}
	c := h.cands[job.Attempt.KnowledgeSpaceID]
	job.CompleteThrough(c.ID, c.Fingerprint)
	return nil
}

// served is the sorted set of tenants h ran.
func (h *tenantRecorder) served() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Compact(slices.Sorted(slices.Values(h.tenants)))
}

// TestSourcesWithTenantLists: pgsource.Config.Tenants and ExcludeTenants
// with real workers. The mutation each subtest was seen to fail on is
// named in its comment.
func TestSourcesWithTenantLists(t *testing.T) {
	t.Parallel()

	// Dedicated capacity for a large tenant beside a source for the rest,
	// at once: each serves only its tenants, and every attempt runs once.
	// Mutation: pgsource not passing ExcludeTenants to FetchLeases — the
	// rest's worker runs big's attempts.
	t.Run("DisjointListsServeOnlyTheirTenants", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t, 24)
		docs, ids := e.tenantDocs(t, 40, "big")
		rest, restIDs := e.tenantDocs(t, 10, "r1", "r2", "r3")
		cands := testfactory.Candidates(append(docs, rest...))
		dedicated, others := &tenantRecorder{cands: cands}, &tenantRecorder{cands: cands}
		wd := e.directWorker(t, dedicated, pgsource.Config{Tenants: []string{"big"}}, worker.Config{Concurrency: 4})
		wr := e.directWorker(t, others, pgsource.Config{ExcludeTenants: []string{"big"}}, worker.Config{Concurrency: 4})
		stop := testfactory.RunAll(e.ctx, t, wd.Run, wr.Run)
		all := slices.Concat(ids["big"], restIDs["r1"], restIDs["r2"], restIDs["r3"])
		waitAllEnded(e.ctx, t, e.pool, all, 60*time.Second)
		stop()
		require.Equal(t, []string{"big"}, dedicated.served())
		require.Equal(t, []string{"r1", "r2", "r3"}, others.served())
		require.Len(t, dedicated.tenants, 40, "each attempt ran once")
		require.Len(t, others.tenants, 30, "each attempt ran once")
		for _, id := range all {
			require.Equal(t, kfstype.RunStateSucceeded, testfactory.RequireInvariants(e.ctx, t, e.pool, id).Attempt.RunState)
		}
	})

	// A cap holds across two sources whose lists both hold the tenant:
	// never more of its attempts run at once than its cap, while its
	// backlog could fill both workers. Mutation: the include walk's
	// tenants given per_tenant as quota whatever their limit — more than
	// 2 ran at once.
	t.Run("ACapHoldsAcrossSourcesWithLists", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t, 24)
		docs, ids := e.tenantDocs(t, 24, "capped", "free", "other")
		require.NoError(t, e.repo.SetTenantLimit(e.ctx, e.pool, &repo.SetTenantLimitParams{TenantID: "capped", MaxRunning: 2}))
		cands := testfactory.Candidates(docs)
		// One count for both workers: the cap is on the two together. A
		// handler runs while its lease is live, so the count never
		// exceeds the live leases the cap bounds.
		conc := &concurrency{}
		a := &tenantRecorder{cands: cands, watched: "capped", hold: 20 * time.Millisecond, conc: conc}
		b := &tenantRecorder{cands: cands, watched: "capped", hold: 20 * time.Millisecond, conc: conc}
		wa := e.directWorker(t, a, pgsource.Config{Tenants: []string{"capped", "free"}}, worker.Config{Concurrency: 6})
		wb := e.directWorker(t, b, pgsource.Config{ExcludeTenants: []string{"free"}}, worker.Config{Concurrency: 6})
		stop := testfactory.RunAll(e.ctx, t, wa.Run, wb.Run)
		waitAllEnded(e.ctx, t, e.pool, slices.Concat(ids["capped"], ids["free"], ids["other"]), 60*time.Second)
		stop()
		t.Logf("capped attempts at once: at most %d", conc.most.Load())
		require.LessOrEqual(t, conc.most.Load(), int32(2), "capped attempts ran at once")
		require.NotContains(t, b.served(), "free")
		require.NotContains(t, a.served(), "other")
	})

	// An exclude source with only excluded tenants' rows due leases none
	// of them, and serves another tenant's row once it commits. Mutation:
	// pgsource not passing ExcludeTenants — big's attempts run.
	t.Run("OnlyExcludedRowsDueLeavesThemAndServesOthers", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t, 8)
		_, ids := e.tenantDocs(t, 20, "big")
		small := testfactory.SeedTenantDocuments(e.ctx, t, e.pool, "small", 1)
		h := &tenantRecorder{cands: testfactory.Candidates(small)}
		w := e.directWorker(t, h, pgsource.Config{ExcludeTenants: []string{"big"}, PollInterval: 100 * time.Millisecond},
			worker.Config{Concurrency: 2})
		stop := testfactory.RunAll(e.ctx, t, w.Run)
		// Idle: registered, nothing leased.
		require.Eventually(t, func() bool {
			var n int
			require.NoError(t, e.pool.QueryRow(e.ctx, `SELECT count(*) FROM document_compilation_outbox_idle_listeners WHERE listener_id = $1`, w.ID()).Scan(&n))
			return n == 1
		}, hangAfter, 5*time.Millisecond)
		smallID := e.startMany(t, small)
		waitAllEnded(e.ctx, t, e.pool, smallID, 30*time.Second)
		stop()
		require.Equal(t, []string{"small"}, h.served())
		for _, id := range ids["big"] {
			a := testfactory.RequireInvariants(e.ctx, t, e.pool, id).Attempt
			require.Equal(t, kfstype.RunStateDispatchPending, a.RunState, "an excluded tenant's attempt was touched")
			require.Zero(t, a.ExecutionAttempts)
		}
	})
}

// TestSourceRefusesBadTenantLists: bad lists are refused by New with a
// typed error naming the field. Mutation: New not validating the lists —
// no error.
func TestSourceRefusesBadTenantLists(t *testing.T) {
	t.Parallel()
	pool := newEnv(t, 4).pool
	tooMany := make([]string, repo.MaxTenantList+1)
	for i := range tooMany {
		tooMany[i] = fmt.Sprint(i)
	}
	for field, cfg := range map[string]pgsource.Config{
		"Config.Tenants":           {Tenants: []string{}},
		"Config.ExcludeTenants":    {Tenants: []string{"a"}, ExcludeTenants: []string{"b"}},
		"Config.Tenants[1]":        {Tenants: []string{"a", "a"}},
		"Config.ExcludeTenants[0]": {ExcludeTenants: []string{""}},
		"Config.Tenants[0]":        {Tenants: []string{strings.Repeat("x", repo.MaxTenantIDLength+1)}},
	} {
		_, err := pgsource.New(pool, &cfg)
		var ie *repo.InputError
		require.ErrorAs(t, err, &ie, field)
		require.ErrorIs(t, err, repo.ErrInvalidInput)
		require.Equal(t, field, ie.Field, "%v", err)
	}
	_, err := pgsource.New(pool, &pgsource.Config{ExcludeTenants: tooMany})
	require.ErrorContains(t, err, "Config.ExcludeTenants")
	// nil and an empty exclude list are no list.
	_, err = pgsource.New(pool, &pgsource.Config{ExcludeTenants: []string{}})
	require.NoError(t, err)
}
