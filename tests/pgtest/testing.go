package pgtest

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/knowledgefs/kfsdb/migrate/redact"
	"github.com/knowledgefs/kfsdb/tests/scratch"
)

// pkgState is the server and template of the running test package, set by
// Main.
var pkgState struct {
	server   *Server
	template string
}

// DB is a database created for one test and dropped when the test ends.
type DB struct {
	// Name is the database name (kfstest_<random>).
	Name string
	// Pool is connected to the database and closed when the test ends.
	Pool *pgxpool.Pool
	// URL is the database's URL, for opening more connections (for example
	// with migrate.OpenSQL or psql). It holds the password: see redact.Text.
	URL string
}

// Main runs a test package against one PostgreSQL server: call it from
// TestMain. It starts the server ([StartServer]), creates a template database
// with every migration applied, runs the tests, drops the template,
// terminates the server and exits with the tests' exit code. If no server can
// be started it prints why and exits with status 1.
func Main(m *testing.M) {
	os.Exit(runMain(m, Options{}))
}

// MainWithOptions is [Main] with a server acquired with opts (see
// [StartServerWithOptions]); for example Options{PersistentData: true} for
// packages that restart the server.
func MainWithOptions(m *testing.M, opts Options) {
	os.Exit(runMain(m, opts))
}

// Run is [MainWithOptions] returning the exit code instead of exiting, for
// a TestMain with its own cleanup to do after the tests.
func Run(m *testing.M, opts Options) int {
	return runMain(m, opts)
}

func runMain(m *testing.M, opts Options) int {
	if !flag.Parsed() {
		flag.Parse() // testing's flags are registered by now
	}
	ctx := context.Background()
	start := time.Now()
	srv, err := StartServerWithOptions(ctx, opts)
	if err != nil {
		fmt.Fprintf(os.Stderr, "%s\n", redact.Text(err.Error()))
		return 1
	}
	defer func() {
		if err := srv.Close(); err != nil {
			fmt.Fprintf(os.Stderr, "pgtest: %v\n", err)
		}
	}()
	// Without the Ryuk reaper nothing else removes the container, so an
	// interrupted run (Ctrl-C) removes it before exiting.
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	defer signal.Stop(sigs)
	go func() {
		if _, ok := <-sigs; ok {
			fmt.Fprintln(os.Stderr, "pgtest: interrupted; removing the server")
			_ = srv.Close()
			os.Exit(1)
		}
	}()

	template := scratch.RandomName("kfstest_tmpl")
	if err := srv.CreateTemplate(ctx, template); err != nil {
		fmt.Fprintf(os.Stderr, "pgtest: %s\n", redact.Text(err.Error()))
		return 1
	}
	defer func() {
		if err := srv.DropDatabase(ctx, template); err != nil {
			fmt.Fprintf(os.Stderr, "pgtest: %s\n", redact.Text(err.Error()))
		}
	}()
	fmt.Fprintf(os.Stderr, "pgtest: %s; template %s ready in %s\n", srv.Description(), template, time.Since(start).Round(time.Millisecond))

	pkgState.server, pkgState.template = srv, template
	return m.Run()
}

// AdminURL returns the URL of the administration database of the package's
// server (see [Server.AdminURL]). It fails the test outside [Main].
func AdminURL(t testing.TB) string {
	t.Helper()
	return mustServer(t).AdminURL()
}

// NewDB creates a database for this test from the package's migrated
// template, connects a pool to it and registers a cleanup that closes the
// pool and drops the database. Safe to call from parallel tests.
func NewDB(t testing.TB) *DB {
	t.Helper()
	mustServer(t)
	return newDB(t, pkgState.template)
}

// NewEmptyDB is like [NewDB] but the database is a copy of template0: no
// tables and no goose version table, for tests that run migrations.
func NewEmptyDB(t testing.TB) *DB {
	t.Helper()
	mustServer(t)
	return newDB(t, "template0")
}

// CurrentServer returns the package's server, for tests that need more than
// one database per test. It fails the test outside [Main].
func CurrentServer(t testing.TB) *Server {
	t.Helper()
	return mustServer(t)
}

func mustServer(t testing.TB) *Server {
	t.Helper()
	if pkgState.server == nil {
		t.Fatal(errNoServer)
	}
	return pkgState.server
}

func newDB(t testing.TB, template string) *DB {
	t.Helper()
	srv := pkgState.server
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	name := scratch.RandomName("kfstest")
	url, err := srv.CreateDatabase(ctx, name, template)
	if err != nil {
		t.Fatalf("pgtest: %s", redact.Text(err.Error()))
	}
	pool, err := pgxpool.New(ctx, url)
	if err != nil {
		_ = srv.DropDatabase(ctx, name)
		t.Fatalf("pgtest: could not connect to database %s: %s", name, redact.Text(err.Error()))
	}
	t.Cleanup(func() {
		pool.Close()
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := srv.DropDatabase(ctx, name); err != nil {
			t.Errorf("pgtest: %s", redact.Text(err.Error()))
		}
	})
	return &DB{Name: name, Pool: pool, URL: url}
}
