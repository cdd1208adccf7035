package repo_test

import (
	"context"
	"encoding/json"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/knowledgefs/kfsdb/kfstype"
	"github.com/knowledgefs/kfsdb/repo"
	"github.com/knowledgefs/kfsdb/tests/testfactory"
)

// statementRecorder keeps the SQL and arguments of every statement sent,
// so the test can EXPLAIN exactly what a transition ran, and the names of
// the statements in the order they were sent.
type statementRecorder struct {
	mu   sync.Mutex
	last map[string]recorded // by query name
	sent []string
}

func newStatementRecorder() *statementRecorder {
	return &statementRecorder{last: map[string]recorded{}}
}

// recordingPool is a pool on url whose statements rec records, closed at
// the end of the test.
func recordingPool(t testing.TB, ctx context.Context, url string) (pool *pgxpool.Pool, rec *statementRecorder) {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(url)
	require.NoError(t, err)
	rec = newStatementRecorder()
	cfg.ConnConfig.Tracer = rec
	pool, err = pgxpool.NewWithConfig(ctx, cfg)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	return pool, rec
}

// sqlAndArgs is the last statement named name, with its arguments.
func (r *statementRecorder) sqlAndArgs(name string) recorded {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.last[name]
}

// names are the query names sent so far, in order.
func (r *statementRecorder) names() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.sent...)
}

// rename files the last statement named name under to, so that the next
// one of that name does not replace it (the same statement with other
// arguments).
func (r *statementRecorder) rename(name, to string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.last[to] = r.last[name]
	delete(r.last, name)
}

// sql is the text of the last statement named name.
func (r *statementRecorder) sql(name string) string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.last[name].sql
}

type recorded struct {
	sql  string
	args []any
}

func (r *statementRecorder) TraceQueryStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceQueryStartData) context.Context {
	if name, ok := queryName(d.SQL); ok {
		r.mu.Lock()
		r.last[name] = recorded{sql: d.SQL, args: d.Args}
		r.sent = append(r.sent, name)
		r.mu.Unlock()
	}
	return ctx
}

func (r *statementRecorder) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

// queryName reads sqlc's "-- name: X :kind" header.
func queryName(sql string) (string, bool) {
	const prefix = "-- name: "
	if !strings.HasPrefix(sql, prefix) {
		return "", false
	}
	name, _, ok := strings.Cut(sql[len(prefix):], " ")
	return name, ok
}

// planNode is the part of EXPLAIN (FORMAT JSON) the tests read (the
// counts only with ANALYZE and BUFFERS).
type planNode struct {
	NodeType         string     `json:"Node Type"`
	RelationName     string     `json:"Relation Name"`
	IndexName        string     `json:"Index Name"`
	SharedHit        int64      `json:"Shared Hit Blocks"`
	SharedRead       int64      `json:"Shared Read Blocks"`
	ActualRows       int64      `json:"Actual Rows"`
	ActualLoops      int64      `json:"Actual Loops"`
	RemovedByFilter  int64      `json:"Rows Removed by Filter"`
	RemovedByRecheck int64      `json:"Rows Removed by Index Recheck"`
	Plans            []planNode `json:"Plans"`
}

func (n *planNode) walk(f func(*planNode)) {
	f(n)
	for i := range n.Plans {
		n.Plans[i].walk(f)
	}
}

// TestHotStatementsUseSeedIndexes fills the tables with terminal history
// (KFS_PLAN_ROWS attempts, default 100,000) and checks with EXPLAIN that
// each hot statement is served by the seed's indexes and never scans the
// attempt or outbox table sequentially.
func TestHotStatementsUseSeedIndexes(t *testing.T) {
	b := setup(t)
	rows := 100_000
	if v := os.Getenv("KFS_PLAN_ROWS"); v != "" {
		n, err := strconv.Atoi(v)
		require.NoError(t, err)
		rows = n
	}
	pool, rec := recordingPool(t, b.ctx, b.db.URL)
	ctx := b.ctx

	start := time.Now()
	require.NoError(t, testfactory.InsertHistory(ctx, pool, rows))
	t.Logf("%d historical attempts inserted and analyzed in %s", rows, time.Since(start).Round(time.Millisecond))

	// Run each hot transition once, recording its statement.
	r := b.repo
	drv := &testfactory.Driver{Repo: r, DB: pool}
	s := testfactory.NewScope(ctx, t, pool, nil)
	a, lease, _ := drv.Running(ctx, t, s, nil)
	_, err := r.Heartbeat(ctx, pool, &repo.HeartbeatParams{Lease: lease})
	require.NoError(t, err)
	_, err = r.Advance(ctx, pool, &repo.AdvanceParams{Lease: lease, Checkpoint: kfstype.CheckpointParsed})
	require.NoError(t, err)
	_, err = r.AdvanceTo(ctx, pool, &repo.AdvanceToParams{Lease: lease, Checkpoint: kfstype.CheckpointNodesGenerated})
	require.NoError(t, err)
	s2 := testfactory.NewScope(ctx, t, pool, nil)
	_, lease2, _ := drv.Running(ctx, t, s2, nil)
	candID, candFP := s2.Publication(ctx, t, pool, "candidate")
	_, err = r.CompleteThrough(ctx, pool, &repo.CompleteThroughParams{Lease: lease2, CandidatePublicationID: &candID, CandidateFingerprint: &candFP})
	require.NoError(t, err)
	_, err = r.Cancel(ctx, pool, &repo.CancelParams{AttemptRef: s.Ref(a.ID)})
	require.NoError(t, err)
	// A version with history, in a tenant with more: the plan must go by
	// document version, not by tenant.
	var hist repo.ListDocumentVersionAttemptsParams
	require.NoError(t, pool.QueryRow(ctx, `SELECT tenant_id, knowledge_space_id, document_asset_id, document_version
		FROM document_compilation_attempts WHERE tenant_id = 'history-7' LIMIT 1`).Scan(
		&hist.TenantID, &hist.KnowledgeSpaceID, &hist.DocumentAssetID, &hist.DocumentVersion))
	listed, err := r.ListDocumentVersionAttempts(ctx, pool, &hist)
	require.NoError(t, err)
	require.Len(t, listed, 100)
	_, err = r.Purge(ctx, pool, &repo.PurgeParams{TenantID: "history-7", CompletedBefore: time.Now().Add(-28 * 24 * time.Hour), BatchSize: 100})
	require.NoError(t, err)
	_, err = r.PurgeTenants(ctx, pool, &repo.PurgeTenantsParams{CompletedBefore: time.Now().Add(-28 * 24 * time.Hour)})
	require.NoError(t, err)
	_, err = r.OutboxListenerIdle(ctx, pool, &repo.OutboxListenerIdleParams{ListenerID: "plan-relay", TTL: time.Minute})
	require.NoError(t, err)
	// Direct delivery walks 50 tenants of history and one with a due row.
	drv.Start(ctx, t, testfactory.NewScope(ctx, t, pool, nil), nil)
	fetched, err := r.FetchLeases(ctx, pool, &repo.FetchLeasesParams{WorkerID: "plan-worker", BatchSize: 8})
	require.NoError(t, err)
	require.Len(t, fetched.Leased, 1)
	// With tenant lists: the include list walked itself, the exclude list
	// passing history-7 (2% of the history) and a tenant with a due row.
	rec.rename("FetchLeases", "FetchLeasesPlain")
	included, excluded := testfactory.NewScope(ctx, t, pool, nil), testfactory.NewScope(ctx, t, pool, nil)
	drv.Start(ctx, t, included, nil)
	drv.Start(ctx, t, excluded, nil)
	fetched, err = r.FetchLeases(ctx, pool, &repo.FetchLeasesParams{WorkerID: "plan-worker", BatchSize: 8,
		Tenants: []string{included.TenantID, "history-7", "history-8"}})
	require.NoError(t, err)
	require.Len(t, fetched.Leased, 1)
	rec.rename("FetchLeases", "FetchLeasesIncludeList")
	drv.Start(ctx, t, testfactory.NewScope(ctx, t, pool, nil), nil)
	fetched, err = r.FetchLeases(ctx, pool, &repo.FetchLeasesParams{WorkerID: "plan-worker", BatchSize: 8,
		ExcludeTenants: []string{excluded.TenantID, "history-7"}})
	require.NoError(t, err)
	require.Len(t, fetched.Leased, 1)
	rec.rename("FetchLeases", "FetchLeasesExcludeList")
	rec.rename("FetchLeasesPlain", "FetchLeases")
	// The operator reads, on history-7's 2% of the history.
	_, err = r.ListAttempts(ctx, pool, &repo.ListAttemptsParams{TenantID: "history-7",
		States: []kfstype.RunState{kfstype.RunStateRunning, kfstype.RunStateFailed}, Limit: 100})
	require.NoError(t, err)
	// The console's bulk filter: an age window and an error code. Kept
	// under its own name, beside the plain list.
	plainList := rec.sqlAndArgs("ListAttempts")
	_, err = r.ListAttempts(ctx, pool, &repo.ListAttemptsParams{TenantID: "history-7",
		States: []kfstype.RunState{kfstype.RunStateRunning, kfstype.RunStateFailed}, Limit: 100,
		OlderThan: 7 * 24 * time.Hour, NewerThan: 60 * 24 * time.Hour, LastErrorCode: "X"})
	require.NoError(t, err)
	rec.mu.Lock()
	rec.last["ListAttemptsFiltered"], rec.last["ListAttempts"] = rec.last["ListAttempts"], plainList
	rec.mu.Unlock()
	_, err = r.CountAttempts(ctx, pool, &repo.CountAttemptsParams{TenantID: "history-7"})
	require.NoError(t, err)
	_, err = r.CountAttempts(ctx, pool, &repo.CountAttemptsParams{AllTenants: true})
	require.NoError(t, err)
	_, err = r.OutboxBacklog(ctx, pool, &repo.OutboxBacklogParams{})
	require.NoError(t, err)
	_, err = r.ListStuck(ctx, pool, &repo.ListStuckParams{TenantID: "history-7", Limit: 100})
	require.NoError(t, err)
	_, err = r.Throughput(ctx, pool, &repo.ThroughputParams{AllTenants: true})
	require.NoError(t, err)

	// Statements that find rows by a scan of history name the index that
	// must serve them; point lookups by id may use any index (the planner
	// picks pkey, or a composite index that ends in id), but never a
	// sequential scan.
	want := map[string][]string{
		"Start":       {"document_compilation_attempts_scope_version_active_uq"},
		"ClaimOutbox": {"document_compilation_outbox_delivery_due_idx"},
		// Tenants are walked and their live attempts read off one index
		// (tenant_id, completed_at IS NULL, id); the outbox row by its
		// attempt.
		"FetchLeases": {"document_compilation_attempts_tenant_completed_idx", "document_compilation_outbox_attempt_event_uq"},
		// The same indexes with tenant lists: each included tenant probed
		// on tenant_completed_idx (no descent to find it), an excluded one
		// passed by one descent of it.
		"FetchLeasesIncludeList": {"document_compilation_attempts_tenant_completed_idx", "document_compilation_outbox_attempt_event_uq"},
		"FetchLeasesExcludeList": {"document_compilation_attempts_tenant_completed_idx", "document_compilation_outbox_attempt_event_uq"},
		"MarkDispatched":         nil,
		"AcquireLease":           nil,
		"Heartbeat":              nil,
		"Advance":                nil,
		"CompleteThrough":        nil,
		"EndAttempt":             nil,
		"Purge":                  {"document_compilation_attempts_tenant_completed_idx"},
		// The tenants walked, and each one's oldest completion probed, on
		// the same index.
		"PurgeTenants": {"document_compilation_attempts_tenant_completed_idx"},
		// The next due time is read off the heads of both due indexes.
		"OutboxListenerIdle": {"document_compilation_outbox_delivery_due_idx", "document_compilation_outbox_lock_recovery_idx"},
		// Both indexes lead with the full document version.
		"ListDocumentVersionAttempts": {"document_compilation_attempts_document_version_idx|document_compilation_attempts_scope_version_active_uq"},
		// Operator reads: a tenant's attempts in index order; capped counts
		// (a tenant's range, or a rare state's); the due heads; the stuck
		// rows at the heads of the recovery and due indexes.
		"ListAttempts": {"document_compilation_attempts_tenant_completed_idx"},
		// The same range scans, the age window bounding the terminal one.
		"ListAttemptsFiltered": {"document_compilation_attempts_tenant_completed_idx"},
		"CountAttempts": {"document_compilation_attempts_tenant_completed_idx|document_compilation_attempts_scope_version_active_uq|" +
			"document_compilation_attempts_run_schedule_idx|document_compilation_attempts_lease_recovery_idx"},
		"CountAttemptsAllTenants": {"document_compilation_attempts_run_schedule_idx"},
		"OutboxBacklog":           {"document_compilation_outbox_delivery_due_idx", "document_compilation_outbox_lock_recovery_idx"},
		"ListStuck": {"document_compilation_attempts_lease_recovery_idx", "document_compilation_outbox_lock_recovery_idx",
			"document_compilation_outbox_delivery_due_idx"},
		// Each tenant's window of ended attempts, the tenants found by a
		// walk of the same index.
		"Throughput": {"document_compilation_attempts_tenant_completed_idx"},
	}
	for name, indexes := range want {
		t.Run(name, func(t *testing.T) {
			st, ok := rec.last[name]
			require.True(t, ok, "%s was not run", name)
			var raw []byte
			err := pool.QueryRow(ctx, "EXPLAIN (FORMAT JSON) "+st.sql, st.args...).Scan(&raw)
			require.NoError(t, err)
			var plans []struct {
				Plan planNode `json:"Plan"`
			}
			require.NoError(t, json.Unmarshal(raw, &plans))
			used := map[string]bool{}
			plans[0].Plan.walk(func(n *planNode) {
				if n.IndexName != "" {
					used[n.IndexName] = true
				}
				if n.NodeType == "Seq Scan" {
					require.NotContains(t, []string{"document_compilation_attempts", "document_compilation_outbox"}, n.RelationName,
						"%s scans %s sequentially:\n%s", name, n.RelationName, raw)
				}
			})
			for _, alternatives := range indexes {
				ok := false
				for _, idx := range strings.Split(alternatives, "|") {
					ok = ok || used[idx]
				}
				require.True(t, ok, "%s does not use %s; uses %v:\n%s", name, alternatives, used, raw)
			}
			require.NotEmpty(t, used, "%s uses no index", name)
		})
	}
}

// TestFetchLeasesPlanWithEmptyTableStatistics: statistics taken while the
// tables were empty (a fresh deploy, before autovacuum's first analyze)
// must not lead FetchLeases into a plan that walks every tenant's offers
// once per attempt. Before offers was MATERIALIZED that plan read 260,000
// buffers (450 ms) to lease 8 of 400 due rows.
func TestFetchLeasesPlanWithEmptyTableStatistics(t *testing.T) {
	b := setup(t)
	ctx := b.ctx
	pool, rec := recordingPool(t, ctx, b.db.URL)

	_, err := pool.Exec(ctx, "VACUUM ANALYZE document_compilation_attempts, document_compilation_outbox")
	require.NoError(t, err)
	r := repo.New(nil)
	testfactory.StartAll(ctx, t, r, pool, testfactory.SeedDocuments(ctx, t, pool, 20, 20), 0)

	tx, err := pool.Begin(ctx)
	require.NoError(t, err)
	res, err := r.FetchLeases(ctx, tx, &repo.FetchLeasesParams{WorkerID: "plan-worker", BatchSize: 8})
	require.NoError(t, err)
	require.Len(t, res.Leased, 8)
	require.NoError(t, tx.Rollback(ctx))
	st := rec.last["FetchLeases"]

	buffers, ms := analyzeBuffers(t, ctx, pool, st)
	t.Logf("FetchLeases on 400 due rows of 20 tenants, statistics of empty tables: %d buffers, %.1f ms", buffers, ms)
	require.Less(t, buffers, int64(10_000), "FetchLeases read %d buffers: a plan that repeats the offers per row", buffers)
}

// analyzed is what EXPLAIN (ANALYZE, BUFFERS) said of one run.
type analyzed struct {
	// buffers the execution read (shared hit and read), and its time.
	buffers int64
	ms      float64
	// rowsRead are the rows each table's scans returned or filtered out,
	// over all their loops, by table name: a count of what the plan read,
	// which buffers understate on small tables (a page read again is one
	// buffer).
	rowsRead map[string]int64
}

// analyzeBuffers runs st under EXPLAIN (ANALYZE, BUFFERS), in a
// transaction rolled back, and returns the shared buffers its execution
// read (hit and read) and its execution time in ms.
func analyzeBuffers(t *testing.T, ctx context.Context, pool *pgxpool.Pool, st recorded) (int64, float64) {
	t.Helper()
	a := analyze(t, ctx, pool, st)
	return a.buffers, a.ms
}

// analyze runs st under EXPLAIN (ANALYZE, BUFFERS), in a transaction
// rolled back.
func analyze(t *testing.T, ctx context.Context, pool *pgxpool.Pool, st recorded) analyzed {
	t.Helper()
	require.NotEmpty(t, st.sql, "no statement recorded")
	tx, err := pool.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(ctx) }()
	var raw []byte
	require.NoError(t, tx.QueryRow(ctx, "EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) "+st.sql, st.args...).Scan(&raw))
	var plans []struct {
		Plan          planNode `json:"Plan"`
		ExecutionTime float64  `json:"Execution Time"`
	}
	require.NoError(t, json.Unmarshal(raw, &plans))
	root := plans[0].Plan
	a := analyzed{buffers: root.SharedHit + root.SharedRead, ms: plans[0].ExecutionTime, rowsRead: map[string]int64{}}
	root.walk(func(n *planNode) {
		if n.RelationName != "" {
			a.rowsRead[n.RelationName] += (n.ActualRows + n.RemovedByFilter + n.RemovedByRecheck) * n.ActualLoops
		}
	})
	return a
}

// TestFetchLeasesPlanWithTenantLimits: with 5,000 limited tenants
// (migration 0011; analyzed), FetchLeases reads each walked tenant's
// limits by the table's primary key, in the walk's probe and in the lock,
// never by a sequential scan of the limits (which would read all 5,000
// rows per tenant walked). Mutation caught: the walk's probe matching an
// expression of tenant_id (an empty string appended to l.tenant_id: a
// Seq Scan on it).
func TestFetchLeasesPlanWithTenantLimits(t *testing.T) {
	b := setup(t)
	ctx := b.ctx
	pool, rec := recordingPool(t, ctx, b.db.URL)
	r := repo.New(nil)
	testfactory.StartAll(ctx, t, r, pool, testfactory.SeedDocuments(ctx, t, pool, 20, 20), 0)
	_, err := pool.Exec(ctx, `INSERT INTO document_compilation_tenant_limits (tenant_id, leases_per_second, burst, tokens, tokens_at, paused_at, updated_at)
		SELECT tenant_id, 1000, 1000, 1000, now(), NULL, now() FROM document_compilation_attempts GROUP BY tenant_id
		UNION ALL
		SELECT 'limited-' || g, 1, 1, 1, now(), CASE WHEN g % 10 = 0 THEN now() END, now() FROM generate_series(1, 5000) g`)
	require.NoError(t, err)
	_, err = pool.Exec(ctx, "VACUUM ANALYZE document_compilation_tenant_limits, document_compilation_attempts, document_compilation_outbox")
	require.NoError(t, err)

	tx, err := pool.Begin(ctx)
	require.NoError(t, err)
	res, err := r.FetchLeases(ctx, tx, &repo.FetchLeasesParams{WorkerID: "plan-worker", BatchSize: 8})
	require.NoError(t, err)
	require.Len(t, res.Leased, 8)
	require.NoError(t, tx.Rollback(ctx))
	st := rec.last["FetchLeases"]
	require.NotEmpty(t, st.sql)
	var raw []byte
	require.NoError(t, pool.QueryRow(ctx, "EXPLAIN (FORMAT JSON) "+st.sql, st.args...).Scan(&raw))
	var plans []struct {
		Plan planNode `json:"Plan"`
	}
	require.NoError(t, json.Unmarshal(raw, &plans))
	probes := 0
	plans[0].Plan.walk(func(n *planNode) {
		if n.RelationName == "document_compilation_tenant_limits" {
			require.NotEqual(t, "Seq Scan", n.NodeType, "FetchLeases scans the tenant limits:\n%s", raw)
		}
		if n.IndexName == "document_compilation_tenant_limits_pkey" {
			probes++
		}
	})
	require.GreaterOrEqual(t, probes, 2, "the walk's probe and the lock go by the primary key:\n%s", raw)
}
