package repo

import (
	"context"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// customPlanned runs a statement whose best plan depends on its
// arguments with a plan made for them on every call: the operator reads
// and the purge, whose tenant may hold 8 attempts or 750,000. Under pgx's
// default mode (QueryExecModeCacheStatement) a statement is a named
// prepared statement, and from its sixth execution PostgreSQL may run its
// generic plan, estimated for an average tenant: ListAttempts' generic
// plan read the largest tenant's whole history and sorted it (45 ms at
// 10^5 attempts, growing with the tenant) where the custom plan walks
// tenant_completed_idx to the LIMIT (0.3 ms; make bench-ageing). So on
// such an executor the call runs under QueryExecModeCacheDescribe: the
// unnamed statement, planned at each Bind with the arguments, still one
// round trip once the description is cached. Every other mode already
// uses the unnamed statement (or none), and an executor repo cannot see
// into keeps its own mode. The delivery path's statements stay prepared
// and generic on purpose (plan_class.go).
type customPlanned struct{ DBTX }

func (d customPlanned) Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	return d.DBTX.Query(ctx, sql, d.args(args)...)
}

func (d customPlanned) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	return d.DBTX.QueryRow(ctx, sql, d.args(args)...)
}

func (d customPlanned) Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	return d.DBTX.Exec(ctx, sql, d.args(args)...)
}

// args prepends the custom-planning mode when the executor would run the
// statement as a named prepared statement.
func (d customPlanned) args(args []any) []any {
	if execMode(d.DBTX) != pgx.QueryExecModeCacheStatement {
		return args
	}
	return append([]any{pgx.QueryExecModeCacheDescribe}, args...)
}

// execMode is db's default query exec mode, or -1 when db is not one of
// pgx's executors.
func execMode(db DBTX) pgx.QueryExecMode {
	var conn *pgx.Conn
	switch d := db.(type) {
	case *pgxpool.Pool:
		return d.Config().ConnConfig.DefaultQueryExecMode
	case *pgxpool.Conn:
		conn = d.Conn()
	case *pgx.Conn:
		conn = d
	case pgx.Tx:
		conn = d.Conn()
	}
	if conn == nil {
		return -1
	}
	return conn.Config().DefaultQueryExecMode
}
