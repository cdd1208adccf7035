package bench

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
)

// fetchListCase is one measure of BenchmarkFetchLists: FetchLeases at a
// backlog spread over tenants (and history beside), with the tenant lists
// of lists (none: today's fetch, the baseline of its scenario).
type fetchListCase struct {
	scenario, variant         string
	tenants, backlog, history int
	lists                     fetchLists
}

// everyNth is every nth of the first n of insertBacklog's tenants.
func everyNth(n, nth int) []string {
	var out []string
	for i := 0; i < n; i += nth {
		out = append(out, budgetTenant(i))
	}
	return out
}

// historyTenants are testfactory.InsertHistory's 50 tenants.
func historyTenants() []string {
	out := make([]string, 50)
	for i := range out {
		out[i] = fmt.Sprintf("history-%d", i)
	}
	return out
}

// fetchListCases: each scenario without lists, then with an include list
// and an exclude list of some of its tenants (and, where it tells
// something, of all of them).
func fetchListCases() []fetchListCase {
	all1000 := everyNth(1000, 1)
	return []fetchListCase{
		{"tenants=1000", "none", 1000, 10_000, 0, fetchLists{}},
		{"tenants=1000", "include=100", 1000, 10_000, 0, fetchLists{include: everyNth(1000, 10), served: 100}},
		{"tenants=1000", "include=1000", 1000, 10_000, 0, fetchLists{include: all1000, served: 1000}},
		{"tenants=1000", "exclude=100", 1000, 10_000, 0, fetchLists{exclude: everyNth(1000, 10), served: 900}},
		// Half the tenants excluded: their rows are half the due index.
		// Every other tenant is the worst case for the walk (an excluded
		// tenant, one descent, between any two it serves); ten in a row,
		// a block the walk passes once per round.
		{"tenants=20", "none", 20, 10_000, 0, fetchLists{}},
		{"tenants=20", "include=10", 20, 10_000, 0, fetchLists{include: everyNth(20, 2), served: 10}},
		{"tenants=20", "exclude=10", 20, 10_000, 0, fetchLists{exclude: everyNth(20, 2), served: 10}},
		{"tenants=20", "exclude=10-in-a-row", 20, 10_000, 0, fetchLists{exclude: everyNth(10, 1), served: 10}},
		// One tenant's backlog beside 10^5 terminal attempts of 50 others:
		// excluded, the history tenants are passed by one descent each.
		{"tenants=1/history=100000", "none", 1, 10_000, 100_000, fetchLists{}},
		{"tenants=1/history=100000", "include=1", 1, 10_000, 100_000, fetchLists{include: []string{budgetTenant(0)}, served: 1}},
		{"tenants=1/history=100000", "exclude=50", 1, 10_000, 100_000, fetchLists{exclude: historyTenants(), served: 1}},
	}
}

// BenchmarkFetchLists prints FetchLeases' shared buffers and statements
// per lease with tenant lists beside the same scenario without (today's
// fetch), measured as BenchmarkFetchBudget measures (a worker of 8 slots
// draining, each batch completed), one line per case:
// "fetch-lists,<plans>,<scenario>,<variant>,<buffers/lease>,<stmts/lease>,<ratio
// to none>", plans "auto" (PostgreSQL's choice) or "generic".
// Counts, not times; the goal is a ratio of at most 1.1. PGOPTIONS='-c
// plan_cache_mode=force_generic_plan' measures the generic plans a
// source's kept connections run (internal/keptconn). `make
// bench-fetch-lists`.
func BenchmarkFetchLists(b *testing.B) {
	requireEnv(b)
	if b.N > 1 {
		b.Skip("measured once")
	}
	mode := "auto"
	if strings.Contains(os.Getenv("PGOPTIONS"), "force_generic_plan") {
		mode = "generic"
	}
	// FETCH_LISTS_VARIANTS=none measures the baselines only (a checkout
	// without tenant lists: today's statement, its FetchLeases call without
	// the lists).
	only := os.Getenv("FETCH_LISTS_VARIANTS")
	base := map[string]float64{}
	for _, c := range fetchListCases() {
		if only != "" && c.variant != only {
			continue
		}
		cost, err := measureFetchCostWith(context.Background(), c.tenants, c.backlog, c.history, false, c.lists)
		if err != nil {
			b.Fatalf("%s %s: %v", c.scenario, c.variant, err)
		}
		bpl := cost.buffersPerLease()
		if c.variant == "none" {
			base[c.scenario] = bpl
		}
		fmt.Printf("fetch-lists,%s,%s,%s,%.1f,%.3f,%.2f\n", mode, c.scenario, c.variant, bpl, cost.stmtsPerLease(), bpl/base[c.scenario])
	}
}
