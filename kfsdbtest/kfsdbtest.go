// Package kfsdbtest is kfsdb's test kit for application teams: it gives
// each test a PostgreSQL database with kfsdb's migrations applied, inserts
// the platform's rows an attempt needs, asserts on attempts and outbox
// rows, and runs one attempt through the application's own handler the way
// the worker does, without a worker loop.
//
//	func TestMain(m *testing.M) { kfsdbtest.Main(m) }
//
//	func TestCompile(t *testing.T) {
//		db := kfsdbtest.NewDB(t)                       // migrated, this test's own
//		doc := db.Document(t, "acme")                  // space, asset, candidate
//		a := db.Start(t, db.StartParams(t, doc.Asset)) // dispatch_pending
//		db.Work(t, myHandler(doc.Candidate), nil)      // lease, handler, outcome
//		db.RequireAttempt(t, a.ID, kfsdbtest.AttemptWant{RunState: kfstype.RunStateSucceeded})
//	}
//
// myHandler is the application's handler; here it binds the candidate
// publication and returns nil, so the worker completes the attempt
// (internal/docexample, which go test compiles and runs, has this example
// and the handler).
//
// The server is acquired once per test binary, at the first database a
// test asks for:
//
//  1. KFS_TEST_DATABASE_URL: an existing server. The kit connects to the
//     database in the URL only to create and drop its own databases
//     (kfsdbtest_*), and touches nothing else there.
//  2. Otherwise a Docker container of KFS_TEST_POSTGRES_IMAGE (default
//     [DefaultImage], the official image) through testcontainers-go. With
//     a local Docker engine its port is published on 127.0.0.1 only.
//
// Migrations run once, on a template database; each test's database is a
// copy of it (CREATE DATABASE ... TEMPLATE, well under a second on the
// container's in-memory data directory), dropped when the test ends, so
// tests can run with t.Parallel(). [Main] removes the template and the
// container after the tests; it is required, because testcontainers' Ryuk
// reaper, which would otherwise remove a forgotten container, is often
// disabled (TESTCONTAINERS_RYUK_DISABLED=true) where its image cannot be
// pulled.
//
// The package's examples (Example_start and the others) are kfsdb's own
// runnable examples of repo, worker and pgsource: they run under go test
// against the kit's database, which the root module cannot require.
package kfsdbtest

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/knowledgefs/kfsdb/migrate/redact"
	"github.com/knowledgefs/kfsdb/repo"
)

const (
	// DefaultImage is the image started when KFS_TEST_POSTGRES_IMAGE is
	// unset: the official PostgreSQL 17 image.
	DefaultImage = "postgres:17-alpine"
	// EnvDatabaseURL names the variable holding an existing server's URL,
	// used instead of a container.
	EnvDatabaseURL = "KFS_TEST_DATABASE_URL"
	// EnvImage names the variable holding the Docker image to run when
	// EnvDatabaseURL is unset.
	EnvImage = "KFS_TEST_POSTGRES_IMAGE"
	// EnvTestRun names the variable whose value, when set, labels the
	// container as LabelTestRun: a CI job that sets it can tell its own
	// leftover containers from those of other jobs on the same engine.
	EnvTestRun = "KFS_TEST_RUN"
	// LabelTestRun is the container label carrying EnvTestRun's value.
	LabelTestRun = "kfsdb.test-run"
)

// ErrNoMain is returned (or fails the test) when a database is asked for
// in a test binary whose TestMain does not call [Main]: nothing would
// remove the container and the template afterwards.
var ErrNoMain = errors.New("kfsdbtest: call kfsdbtest.Main(m) from TestMain first")

// binary is the test binary's server, started by the first database asked
// for after Main.
var binary struct {
	mu   sync.Mutex
	main bool
	srv  *server
	err  error
}

// Main runs the test binary's tests (m.Run), then drops the template
// database, removes the container the kit started, if any, and exits with
// the tests' status. Call it from TestMain. An interrupt (Ctrl-C, SIGTERM)
// removes the container before the binary exits.
func Main(m *testing.M) {
	if !flag.Parsed() {
		flag.Parse()
	}
	binary.mu.Lock()
	binary.main = true
	binary.mu.Unlock()
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	go func() {
		if _, ok := <-sigs; ok {
			fmt.Fprintln(os.Stderr, "kfsdbtest: interrupted; removing the server")
			shutdown()
			os.Exit(1)
		}
	}()
	code := m.Run()
	signal.Stop(sigs)
	if err := shutdown(); err != nil {
		fmt.Fprintln(os.Stderr, redact.Text(err.Error()))
		if code == 0 {
			code = 1
		}
	}
	os.Exit(code)
}

func shutdown() error {
	binary.mu.Lock()
	defer binary.mu.Unlock()
	if binary.srv == nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	err := binary.srv.close(ctx)
	binary.srv = nil
	return err
}

// theServer returns the binary's server, starting it on first use. A
// failure to start is remembered: every later test fails with it at once.
func theServer(ctx context.Context) (*server, error) {
	binary.mu.Lock()
	defer binary.mu.Unlock()
	switch {
	case !binary.main:
		return nil, ErrNoMain
	case binary.srv == nil && binary.err == nil:
		binary.srv, binary.err = startServer(ctx)
	}
	return binary.srv, binary.err
}

// DB is a database of one test (or one example), with kfsdb's migrations
// applied unless it came from [NewEmptyDB].
type DB struct {
	// Name is the database's name (kfsdbtest_<random>).
	Name string
	// URL is the database's URL, for more connections (migrate.Up, a
	// pool of your own, psql). It holds the password: see redact.Text.
	URL string
	// Pool is a pool on the database, closed when the database is dropped.
	Pool *pgxpool.Pool
	// Repo is a repo.Repo on the database clock, for the kit's own reads.
	Repo *repo.Repo

	srv *server
}

// NewDB gives the test a database of its own with every kfsdb migration
// applied, and drops it when the test ends. It fails the test when no
// server can be had (the error says what to set). Safe in parallel tests.
func NewDB(t testing.TB) *DB {
	t.Helper()
	return newDB(t, false)
}

// NewEmptyDB is [NewDB] without the migrations: an empty database, for
// tests of an application's migration path (migrate.Up on DB.URL).
func NewEmptyDB(t testing.TB) *DB {
	t.Helper()
	return newDB(t, true)
}

func newDB(t testing.TB, empty bool) *DB {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	db, err := create(ctx, empty)
	if err != nil {
		t.Fatal(redact.Text(err.Error()))
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := db.Drop(ctx); err != nil {
			t.Error(err)
		}
	})
	return db
}

// CreateDB is [NewDB] for code without a testing.TB, such as examples: the
// caller drops the database with [DB.Drop].
func CreateDB(ctx context.Context) (*DB, error) {
	return create(ctx, false)
}

func create(ctx context.Context, empty bool) (*DB, error) {
	srv, err := theServer(ctx)
	if err != nil {
		return nil, err
	}
	template := srv.template
	if empty {
		template = "template0"
	}
	name := randomName("kfsdbtest")
	u, err := srv.createDatabase(ctx, name, template)
	if err != nil {
		return nil, err
	}
	cctx, cancel := context.WithTimeout(ctx, connectTimeout)
	defer cancel()
	pool, err := pgxpool.New(cctx, u)
	if err == nil {
		err = pool.Ping(cctx)
	}
	if err != nil {
		if pool != nil {
			pool.Close()
		}
		_ = srv.dropDatabase(context.WithoutCancel(ctx), name)
		return nil, fmt.Errorf("kfsdbtest: could not connect to database %s: %w", name, err)
	}
	return &DB{Name: name, URL: u, Pool: pool, Repo: repo.New(nil), srv: srv}, nil
}

// Drop closes the pool and drops the database, ending its other sessions.
func (db *DB) Drop(ctx context.Context) error {
	db.Pool.Close()
	return db.srv.dropDatabase(ctx, db.Name)
}
