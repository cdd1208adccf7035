package consolehttp_test

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"

	"github.com/knowledgefs/kfsdb/cmd/kfsdb/ops"
	"github.com/knowledgefs/kfsdb/repo"
	"github.com/knowledgefs/kfsdb/tests/pgtest"
)

// noTx is a DBTX that cannot begin a transaction: RunBulk then runs every
// attempt in its own statement and commit, as before batches had one.
type noTx struct{ db repo.DBTX }

func (n noTx) Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	return n.db.Exec(ctx, sql, args...)
}
func (n noTx) Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	return n.db.Query(ctx, sql, args...)
}
func (n noTx) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	return n.db.QueryRow(ctx, sql, args...)
}

// TestMeasureBulkCancel (opt-in: KFS_MEASURE_BULK=1) times a bulk cancel
// of 10,000 live attempts of one tenant: the dry run (PlanBulk), then
// RunBulk in batches of 100, one transaction each, against the same run
// with one commit per attempt. It logs the times; it asserts only that
// every attempt was canceled.
func TestMeasureBulkCancel(t *testing.T) {
	if os.Getenv("KFS_MEASURE_BULK") == "" {
		t.Skip("set KFS_MEASURE_BULK=1 to measure")
	}
	const n = 10_000
	db := pgtest.NewDB(t)
	ctx, r := t.Context(), repo.New(nil)
	start := func(tenant string) {
		space := uuid.New()
		_, err := db.Pool.Exec(ctx, `INSERT INTO knowledge_spaces (id, tenant_id, slug, name) VALUES ($1, $2, $3, 'Space')`, space, tenant, "s-"+tenant)
		require.NoError(t, err)
		rows, err := db.Pool.Query(ctx, `INSERT INTO document_assets (id, knowledge_space_id, filename, mime_type, object_key, sha256, size_bytes, version)
			SELECT gen_random_uuid(), $1, 'd.pdf', 'application/pdf', 'k', repeat('0', 64), 1, 1 FROM generate_series(1, $2) RETURNING id`, space, n)
		require.NoError(t, err)
		assets, err := pgx.CollectRows(rows, pgx.RowTo[uuid.UUID])
		require.NoError(t, err)
		for i := 0; i < n; i += repo.MaxBatchSize {
			p := &repo.StartManyParams{}
			for _, a := range assets[i:min(i+repo.MaxBatchSize, n)] {
				p.Starts = append(p.Starts, &repo.StartParams{TenantID: tenant, KnowledgeSpaceID: space, DocumentAssetID: a,
					DocumentVersion: 1, PublicationGenerationID: uuid.New()})
			}
			_, err := r.StartMany(ctx, db.Pool, p)
			require.NoError(t, err)
		}
		_, err = db.Pool.Exec(ctx, "ANALYZE")
		require.NoError(t, err)
	}
	for _, tc := range []struct {
		name string
		db   repo.DBTX
	}{{"batches", db.Pool}, {"per-attempt", noTx{db.Pool}}} {
		tenant := "measure-" + tc.name
		start(tenant)
		began := time.Now()
		plan, err := ops.PlanBulk(ctx, r, db.Pool, ops.Cancel, ops.Filter{TenantID: tenant}, ops.BulkMaxDefault, 20)
		require.NoError(t, err)
		planned := time.Since(began)
		require.Len(t, plan.Targets, n)
		began = time.Now()
		rep, err := ops.RunBulk(ctx, r, tc.db, plan, ops.BulkRun{})
		require.NoError(t, err)
		ran := time.Since(began)
		require.Equal(t, n, rep.Applied)
		t.Logf("%s: dry run of %d matches %s; cancel %s (%.0f attempts/s, %d batches)", tc.name, n, planned.Round(time.Millisecond),
			ran.Round(time.Millisecond), float64(n)/ran.Seconds(), rep.Batches)
	}
}
