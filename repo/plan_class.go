package repo

import (
	"context"
	"math/bits"
	"strconv"
	"sync/atomic"

	"github.com/jackc/pgx/v5"

	"github.com/knowledgefs/kfsdb/db/gen"
)

// FetchLeases runs as one of a few prepared statements, one per size class
// of the two tables it reads, so that the plan a connection caches is
// built on tables about the size of those it runs on.
//
// Why: pgx prepares each statement once per connection, and PostgreSQL
// builds a prepared statement's generic plan at its sixth execution, on
// the tables' sizes then, and keeps it until an ANALYZE invalidates it.
// A worker that starts on an empty queue (a deployment, a drained backlog)
// caches a plan for one-page tables, sequential scans nested in one
// another, and keeps it while the backlog grows: 62 buffers per lease
// became 1,846 at 500 due rows and 26,812 at 2,000, and one fetch took
// 10 s (docs/PERFORMANCE.md, "Plans cached on empty tables"). A fetch that
// meets tables in another class than the last sends another text (the
// same statement, a comment naming the class): a statement of its own to
// PostgreSQL and to pgx's cache, planned afresh on the sizes of now.
// Classes are powers of four in pages, so a plan runs on at most four
// times the pages it was built on; pg_stat_statements, which ignores
// comments, counts the classes as one statement.
//
// The sizes come back with every lease (table_bytes) and, after a fetch
// that leased nothing (when a backlog may arrive before the next),
// from FetchTableBytes, one more round trip, read before the fetch.
type planClass struct {
	tableBytes atomic.Int64
	// known: tableBytes is the reading of a fetch that leased; false at
	// first and after an empty fetch.
	known atomic.Bool
}

// maxPlanClass bounds the classes (4^15 pages of 8 KiB is 8 PiB).
const maxPlanClass = 15

// planClassOf is the size class of tables of n bytes: 0 below 4 pages,
// then one more for every factor of four.
func planClassOf(n int64) int {
	pages := uint64(max(n, 0)) / 8192
	if pages < 4 {
		return 0
	}
	return min((bits.Len64(pages)-1)/2, maxPlanClass)
}

// planClassSuffix[c] ends the statement's text in class c (none in 0).
var planClassSuffix = func() [maxPlanClass + 1]string {
	var s [maxPlanClass + 1]string
	for c := 1; c <= maxPlanClass; c++ {
		s[c] = "\n-- plan class " + strconv.Itoa(c)
	}
	return s
}()

// classed runs the statement's text of plan class c.
type classed struct {
	DBTX
	class int
}

func (d classed) Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	return d.DBTX.Query(ctx, sql+planClassSuffix[d.class], args...)
}

// fetchClass is the class the next fetch runs in, reading the sizes first
// when the last fetch leased nothing.
func (r *Repo) fetchClass(ctx context.Context, db DBTX) (int, error) {
	if !r.plans.known.Load() {
		n, err := r.q.FetchTableBytes(ctx, db)
		if err != nil {
			return 0, err
		}
		r.plans.tableBytes.Store(n)
	}
	return planClassOf(r.plans.tableBytes.Load()), nil
}

// fetched notes what a fetch found: the sizes its rows carry, or none.
// A fetch whose one row only names where its walk ended (walk_end) found
// nothing either.
func (r *Repo) fetched(rows []*gen.FetchLeasesRow) {
	if len(rows) == 0 || (len(rows) == 1 && rows[0].WalkEnd) {
		r.plans.known.Store(false)
		return
	}
	r.plans.tableBytes.Store(rows[0].TableBytes)
	r.plans.known.Store(true)
}
