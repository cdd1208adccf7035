package bench

import (
	"context"
	"flag"
	"fmt"
	"os"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/knowledgefs/kfsdb/migrate"
	"github.com/knowledgefs/kfsdb/migrate/redact"
	"github.com/knowledgefs/kfsdb/tests/pgtest"
	"github.com/knowledgefs/kfsdb/tests/scratch"
)

// EnvDatabaseURL names the server the benchmarks run on; see the package
// documentation.
const EnvDatabaseURL = "KFS_BENCH_DATABASE_URL"

// clients is the number of concurrent clients of the single-attempt
// benchmarks, as pgbench -c 8.
const clients = 8

// env is the package's server and database, set up by TestMain.
var env struct {
	srv   *pgtest.Server
	url   string
	pool  *pgxpool.Pool // clients connections, counting statements
	count *stmtCounter
}

// stmtCounter is a pgx QueryTracer counting statements sent.
type stmtCounter struct{ n atomic.Int64 }

func (c *stmtCounter) TraceQueryStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryStartData) context.Context {
	c.n.Add(1)
	return ctx
}

func (c *stmtCounter) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

func TestMain(m *testing.M) {
	flag.Parse()
	if f := flag.Lookup("test.bench"); (f == nil || f.Value.String() == "") && os.Getenv("KFS_LOADGEN") != "1" {
		os.Exit(m.Run())
	}
	os.Exit(run(m))
}

func run(m *testing.M) int {
	ctx := context.Background()
	var (
		srv *pgtest.Server
		err error
	)
	if u := os.Getenv(EnvDatabaseURL); u != "" {
		srv, err = pgtest.ConnectServer(ctx, u)
	} else {
		srv, err = pgtest.StartServer(ctx)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, redact.Text(err.Error()))
		return 1
	}
	defer srv.Close()
	name := scratch.RandomName("kfsbench")
	url, err := srv.CreateDatabase(ctx, name, "")
	if err != nil {
		fmt.Fprintln(os.Stderr, redact.Text(err.Error()))
		return 1
	}
	defer func() {
		if err := srv.DropDatabase(context.Background(), name); err != nil {
			fmt.Fprintln(os.Stderr, redact.Text(err.Error()))
		}
	}()
	if _, err := migrate.Up(ctx, url); err != nil {
		fmt.Fprintln(os.Stderr, redact.Text(err.Error()))
		return 1
	}
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		fmt.Fprintln(os.Stderr, redact.Text(err.Error()))
		return 1
	}
	env.count = &stmtCounter{}
	cfg.ConnConfig.Tracer = env.count
	cfg.MaxConns, cfg.MinConns = clients, clients
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		fmt.Fprintln(os.Stderr, redact.Text(err.Error()))
		return 1
	}
	defer pool.Close()
	env.srv, env.url, env.pool = srv, url, pool

	// Configuration lines (benchstat keeps "key: value" lines with the
	// results that follow them).
	var version, fsync, syncCommit, sharedBuffers string
	if err := pool.QueryRow(ctx, `SELECT current_setting('server_version'), current_setting('fsync'),
		current_setting('synchronous_commit'), current_setting('shared_buffers')`).Scan(&version, &fsync, &syncCommit, &sharedBuffers); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	fmt.Printf("pg-server: %s\n", strings.ReplaceAll(srv.Description(), " ", "_"))
	fmt.Printf("pg-version: %s\npg-fsync: %s\npg-synchronous-commit: %s\npg-shared-buffers: %s\n", version, fsync, syncCommit, sharedBuffers)
	fmt.Printf("clients: %d\ngomaxprocs: %d\n", clients, runtime.GOMAXPROCS(0))
	return m.Run()
}

// requireEnv skips a benchmark or test that runs outside TestMain's setup.
func requireEnv(tb testing.TB) {
	tb.Helper()
	if env.pool == nil {
		tb.Skip("no server (run with -bench or KFS_LOADGEN=1)")
	}
}

func gomaxprocs() int { return runtime.GOMAXPROCS(0) }

// execEach runs each statement on its own (VACUUM cannot share a
// transaction) and fails tb on the first error.
func execEach(tb testing.TB, pool *pgxpool.Pool, stmts ...string) {
	tb.Helper()
	for _, q := range stmts {
		if _, err := pool.Exec(context.Background(), q); err != nil {
			tb.Fatalf("%s: %v", q, err)
		}
	}
}
