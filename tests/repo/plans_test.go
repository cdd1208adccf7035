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
// so the test can EXPLAIN exactly what a transition ran.
type statementRecorder struct {
	mu   sync.Mutex
	last map[string]recorded // by query name
}

type recorded struct {
	sql  string
	args []any
}

func (r *statementRecorder) TraceQueryStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceQueryStartData) context.Context {
	if name, ok := queryName(d.SQL); ok {
		r.mu.Lock()
		r.last[name] = recorded{sql: d.SQL, args: d.Args}
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

// planNode is the part of EXPLAIN (FORMAT JSON) the test reads.
type planNode struct {
	NodeType     string     `json:"Node Type"`
	RelationName string     `json:"Relation Name"`
	IndexName    string     `json:"Index Name"`
	Plans        []planNode `json:"Plans"`
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
	cfg, err := pgxpool.ParseConfig(b.db.URL)
	require.NoError(t, err)
	rec := &statementRecorder{last: map[string]recorded{}}
	cfg.ConnConfig.Tracer = rec
	pool, err := pgxpool.NewWithConfig(b.ctx, cfg)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	ctx := b.ctx

	// History: one space and asset per 100 attempts, all terminal.
	start := time.Now()
	_, err = pool.Exec(ctx, `
		WITH spaces AS (
		  INSERT INTO knowledge_spaces (id, tenant_id, slug, name)
		  SELECT gen_random_uuid(), 'history-' || (g % 50), 'h-' || g, 'History'
		    FROM generate_series(1, $1::int / 100) g
		  RETURNING id, tenant_id
		), assets AS (
		  INSERT INTO document_assets (id, knowledge_space_id, filename, mime_type, object_key, sha256, size_bytes, version)
		  SELECT gen_random_uuid(), s.id, 'h.pdf', 'application/pdf', 'k', repeat('0', 64), 1, 1 FROM spaces s
		  RETURNING id, knowledge_space_id
		), attempts AS (
		  INSERT INTO document_compilation_attempts (id, tenant_id, knowledge_space_id, document_asset_id,
		    document_version, publication_generation_id, base_head_revision, checkpoint, run_state,
		    active_slot, execution_attempts, max_execution_attempts, last_error_code, row_version,
		    created_at, updated_at, completed_at)
		  SELECT gen_random_uuid(), s.tenant_id, a.knowledge_space_id, a.id, 1, gen_random_uuid(), 0,
		         'queued', CASE WHEN g % 3 = 0 THEN 'failed' ELSE 'canceled' END, NULL, 1, 5, 'X', 3,
		         now() - interval '30 days', now() - interval '29 days', now() - interval '29 days' + g * interval '1 ms'
		    FROM assets a JOIN spaces s ON s.id = a.knowledge_space_id, generate_series(1, 100) g
		  RETURNING id, run_state, created_at
		)
		INSERT INTO document_compilation_outbox (id, attempt_id, event_type, schema_version, payload,
		  idempotency_key, status, dispatch_attempts, available_at, created_at, updated_at)
		SELECT gen_random_uuid(), id, 'document.compile', 1, jsonb_build_object('attemptId', id),
		       'document.compile:' || id, CASE WHEN run_state = 'failed' THEN 'dead' ELSE 'canceled' END,
		       1, created_at, created_at, created_at
		  FROM attempts`, rows)
	require.NoError(t, err)
	_, err = pool.Exec(ctx, "ANALYZE")
	require.NoError(t, err)
	t.Logf("%d historical attempts inserted and analyzed in %s", rows, time.Since(start).Round(time.Millisecond))

	// Run each hot transition once, recording its statement.
	r := b.repo
	drv := &testfactory.Driver{Repo: r, DB: pool}
	s := testfactory.NewScope(ctx, t, pool, nil)
	a, lease, _ := drv.Running(ctx, t, s)
	_, err = r.Heartbeat(ctx, pool, &repo.HeartbeatParams{Lease: lease})
	require.NoError(t, err)
	_, err = r.Advance(ctx, pool, &repo.AdvanceParams{Lease: lease, Checkpoint: kfstype.CheckpointParsed})
	require.NoError(t, err)
	_, err = r.Cancel(ctx, pool, &repo.CancelParams{AttemptRef: s.Ref(a.ID)})
	require.NoError(t, err)
	// A version with history, in a tenant with more: the plan must go by
	// document version, not by tenant.
	var hist repo.DocumentVersion
	require.NoError(t, pool.QueryRow(ctx, `SELECT tenant_id, knowledge_space_id, document_asset_id, document_version
		FROM document_compilation_attempts WHERE tenant_id = 'history-7' LIMIT 1`).Scan(
		&hist.TenantID, &hist.KnowledgeSpaceID, &hist.DocumentAssetID, &hist.DocumentVersion))
	listed, err := r.ListDocumentVersionAttempts(ctx, pool, &hist)
	require.NoError(t, err)
	require.Len(t, listed, 100)
	_, err = r.Purge(ctx, pool, &repo.PurgeParams{TenantID: "history-7", CompletedBefore: time.Now().Add(-28 * 24 * time.Hour), BatchSize: 100})
	require.NoError(t, err)

	// Statements that find rows by a scan of history name the index that
	// must serve them; point lookups by id may use any index (the planner
	// picks pkey, or a composite index that ends in id), but never a
	// sequential scan.
	want := map[string][]string{
		"StartAttempt":                 {"document_compilation_attempts_scope_version_active_uq"},
		"ClaimOutbox":                  {"document_compilation_outbox_delivery_due_idx"},
		"MarkDispatched":               nil,
		"AcquireLease":                 nil,
		"Heartbeat":                    nil,
		"Advance":                      nil,
		"CancelAttempt":                nil,
		"PurgeAttempts":                {"document_compilation_attempts_tenant_completed_idx"},
		// Both indexes lead with the full document version.
		"AttemptListByDocumentVersion": {"document_compilation_attempts_document_version_idx|document_compilation_attempts_scope_version_active_uq"},
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
