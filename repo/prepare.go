package repo

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/knowledgefs/kfsdb/db/gen"
)

// Prepare prepares the statements of a delivery's hot path on conn:
// Start, FetchLeases (in the tables' current size class, plan_class.go),
// FetchTableBytes, CompleteMany, CompleteThrough, Heartbeat and the idle
// registration's two. Call it from pgxpool.Config.AfterConnect:
//
//	cfg.AfterConnect = r.Prepare
//
// Why: a new server process parses and plans a statement against cold
// catalog caches (the tables' indexes, constraints and statistics), and
// FetchLeases is a large statement; on two cores its first parse and
// plans took 70–230 ms per connection, and Start's first plan 6 ms on an
// idle server and up to 114 ms under load, during which the attempt waits
// (docs/PERFORMANCE.md, "Connections that arrive warm"). Prepared here,
// under their own text as pgx's name for them, pgx runs them as prepared
// (pgx looks an SQL text up among a connection's prepared statements
// first); and each is planned once here (EXPLAIN of its generic plan, run
// in a transaction of its own that restores plan_cache_mode), so the
// caches are warm and the first delivery on a connection costs what the
// thousandth does.
//
// Prepared statements live in the server session, so Prepare does nothing
// on a connection whose DefaultQueryExecMode is pgx.QueryExecModeExec or
// pgx.QueryExecModeSimpleProtocol (the modes for PgBouncer's transaction
// pooling, where the next transaction may run on another session).
// Unlike pgx's own statement cache, a statement prepared here is not
// dropped when a migration changes a table's columns under a running
// process; restart it (or close the pool's connections) after such a
// migration.
//
// Errors: an *InputError for a nil receiver, ctx or conn; the server's,
// wrapped, when a statement does not prepare (the
// migrations have not run on this database, say).
func (r *Repo) Prepare(ctx context.Context, conn *pgx.Conn) error {
	// A nil conn is its own field: call would name it "db".
	if conn == nil {
		return &InputError{Field: "conn", Reason: "must not be nil"}
	}
	if err := r.call(ctx, conn).result(); err != nil {
		return err
	}
	switch conn.Config().DefaultQueryExecMode {
	case pgx.QueryExecModeExec, pgx.QueryExecModeSimpleProtocol:
		return nil
	}
	q := r.q
	prepare := func(sql string) error {
		sd, err := conn.Prepare(ctx, sql, sql)
		if err != nil {
			return fmt.Errorf("prepare %s: %w", statementName(sql), mapError(err))
		}
		if err := warmPlanning(ctx, conn, sql, len(sd.ParamOIDs)); err != nil {
			return fmt.Errorf("prepare %s: plan it once: %w", statementName(sql), mapError(err))
		}
		return nil
	}
	// FetchTableBytes first, so reading the size runs the statement
	// prepared here rather than preparing it a second time in pgx's cache.
	if err := prepare(captureSQL(func(db gen.DBTX) error { _, err := q.FetchTableBytes(ctx, db); return err })); err != nil {
		return err
	}
	bytes, err := q.FetchTableBytes(ctx, conn)
	if err != nil {
		return fmt.Errorf("prepare: read the tables' size: %w", mapError(err))
	}
	if r.plans.known.Load() {
		bytes = r.plans.tableBytes.Load()
	}
	// The class the next fetch will most likely run in.
	class := planClassOf(bytes)
	texts := []string{
		captureSQL(func(db gen.DBTX) error { _, err := q.Start(ctx, db, &gen.StartParams{}); return err }),
		captureSQL(func(db gen.DBTX) error {
			_, err := q.FetchLeases(ctx, classed{db, class}, &gen.FetchLeasesParams{})
			return err
		}),
		captureSQL(func(db gen.DBTX) error {
			_, err := q.CompleteMany(ctx, db, &gen.CompleteManyParams{})
			return err
		}),
		captureSQL(func(db gen.DBTX) error {
			_, err := q.CompleteThrough(ctx, db, &gen.CompleteThroughParams{})
			return err
		}),
		captureSQL(func(db gen.DBTX) error { _, err := q.Heartbeat(ctx, db, &gen.HeartbeatParams{}); return err }),
		captureSQL(func(db gen.DBTX) error {
			_, err := q.OutboxListenerIdle(ctx, db, &gen.OutboxListenerIdleParams{})
			return err
		}),
		captureSQL(func(db gen.DBTX) error { return q.OutboxListenerAwake(ctx, db, "") }),
	}
	for _, sql := range texts {
		if err := prepare(sql); err != nil {
			return err
		}
	}
	return nil
}

// warmPlanning plans sql once on conn without running it: the generic
// plan (its parameters unknown, so the planner considers every index as
// a real execution would, where NULL arguments would fold the quals
// away), under a name of its own that is gone again before it returns.
// What stays is what planning loaded into the session's catalog caches.
// SET LOCAL ends with the transaction, so the session keeps its own
// plan_cache_mode.
func warmPlanning(ctx context.Context, conn *pgx.Conn, sql string, params int) error {
	args := strings.TrimSuffix(strings.Repeat("NULL, ", params), ", ")
	if params > 0 {
		args = "(" + args + ")"
	}
	// No arguments: pgx sends it in one simple-protocol message. The
	// newline ends a text that ends in a line comment (FetchLeases' plan
	// class suffix), which would otherwise swallow the rest.
	_, err := conn.Exec(ctx, "BEGIN; SET LOCAL plan_cache_mode = force_generic_plan; "+
		"PREPARE kfsdb_prepare_warm AS "+sql+"\n; "+
		"EXPLAIN (COSTS OFF) EXECUTE kfsdb_prepare_warm"+args+"; "+
		"DEALLOCATE kfsdb_prepare_warm; COMMIT")
	if err != nil && conn.PgConn().TxStatus() != 'I' {
		// Failed inside: leave the session as it was (no transaction, and
		// no statement of that name, which PREPARE leaves behind if the
		// EXPLAIN failed); the error returned is the first one.
		_, _ = conn.Exec(ctx, "ROLLBACK")
		_, _ = conn.Exec(ctx, "DEALLOCATE kfsdb_prepare_warm")
	}
	return err
}

// errCaptured ends a generated query's call once its text is captured.
var errCaptured = errors.New("repo: statement text captured")

// captureSQL returns the text call sends to its DBTX, which runs nothing.
func captureSQL(call func(gen.DBTX) error) string {
	var c sqlCapture
	if err := call(&c); !errors.Is(err, errCaptured) || c.sql == "" {
		// A generated query always reaches its DBTX first.
		panic(fmt.Sprintf("repo: capture a statement's text: %v", err))
	}
	return c.sql
}

// sqlCapture is a DBTX that keeps the text it is given and runs nothing.
type sqlCapture struct{ sql string }

func (c *sqlCapture) Exec(_ context.Context, sql string, _ ...any) (pgconn.CommandTag, error) {
	c.sql = sql
	return pgconn.CommandTag{}, errCaptured
}

func (c *sqlCapture) Query(_ context.Context, sql string, _ ...any) (pgx.Rows, error) {
	c.sql = sql
	return nil, errCaptured
}

func (c *sqlCapture) QueryRow(_ context.Context, sql string, _ ...any) pgx.Row {
	c.sql = sql
	return capturedRow{}
}

type capturedRow struct{}

func (capturedRow) Scan(...any) error { return errCaptured }

// statementName is the sqlc name of a statement's text ("-- name: X ...").
func statementName(sql string) string {
	var name string
	if _, err := fmt.Sscanf(sql, "-- name: %s", &name); err != nil {
		return "statement"
	}
	return name
}
