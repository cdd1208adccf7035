// Package pgbouncer_test runs kfsdb's transitions, the relay (poll only)
// and a worker through PgBouncer in transaction pooling mode, with the pgx
// settings that mode needs. The tests start Debian's pgbouncer binary
// themselves on 127.0.0.1 and skip, saying so, when it is not installed
// (apt-get install -y pgbouncer).
package pgbouncer_test

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/knowledgefs/kfsdb/migrate/redact"
	"github.com/knowledgefs/kfsdb/repo"
	"github.com/knowledgefs/kfsdb/tests/capability"
	"github.com/knowledgefs/kfsdb/tests/pgtest"
	"github.com/knowledgefs/kfsdb/tests/testfactory"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// bouncer is a pgbouncer process this test started.
type bouncer struct {
	port     int
	user     string
	password string
	log      *testfactory.SyncBuffer
}

// url is the URL of database name through the bouncer.
func (b *bouncer) url(name string) string {
	return fmt.Sprintf("postgres://%s:%s@127.0.0.1:%d/%s?sslmode=disable", b.user, b.password, b.port, name)
}

// startBouncer starts pgbouncer in transaction pooling mode on a free
// loopback port, in front of the package's PostgreSQL server, and stops it
// when the test ends. It skips the test when pgbouncer is not installed.
func startBouncer(t *testing.T) *bouncer {
	t.Helper()
	bin, err := exec.LookPath("pgbouncer")
	if err != nil {
		if _, serr := os.Stat("/usr/sbin/pgbouncer"); serr != nil {
			capability.Missing(t, capability.PgBouncer, "pgbouncer is not installed (Debian/Ubuntu: apt-get install -y pgbouncer)")
		}
		bin = "/usr/sbin/pgbouncer"
	}
	server, err := pgconn.ParseConfig(pgtest.AdminURL(t))
	require.NoError(t, err)
	ip := net.ParseIP(server.Host)
	if ip == nil || !ip.IsLoopback() {
		capability.Missing(t, capability.PgBouncer, "the test server is on %s, not on a loopback address; pgbouncer is only pointed at 127.0.0.1", server.Host)
	}

	dir := t.TempDir()
	require.NoError(t, os.Chmod(dir, 0o755)) // readable after pgbouncer drops root
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	port := l.Addr().(*net.TCPAddr).Port
	require.NoError(t, l.Close())

	// auth_type trust: clients on 127.0.0.1 are not asked for a password;
	// pgbouncer logs in to PostgreSQL with the password in auth_file.
	userlist := fmt.Sprintf("%q %q\n", server.User, server.Password)
	config := fmt.Sprintf(`[databases]
* = host=%s port=%d

[pgbouncer]
listen_addr = 127.0.0.1
listen_port = %d
unix_socket_dir =
auth_type = trust
auth_file = %s
pool_mode = transaction
default_pool_size = 10
max_client_conn = 200
ignore_startup_parameters = extra_float_digits
logfile =
pidfile =
`, server.Host, server.Port, port, filepath.Join(dir, "userlist.txt"))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "userlist.txt"), []byte(userlist), 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "pgbouncer.ini"), []byte(config), 0o644))

	args := []string{}
	if os.Geteuid() == 0 {
		// pgbouncer refuses to run as root; -u switches user at startup.
		args = append(args, "-u", unprivilegedUser(t))
	}
	args = append(args, filepath.Join(dir, "pgbouncer.ini"))
	b := &bouncer{port: port, user: server.User, password: server.Password, log: &testfactory.SyncBuffer{}}
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = b.log, b.log
	require.NoError(t, cmd.Start())
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-exited
		}
		if t.Failed() {
			t.Logf("pgbouncer log:\n%s", redact.Text(b.log.String()))
		}
	})

	deadline := time.Now().Add(15 * time.Second)
	for {
		c, err := net.DialTimeout("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), time.Second)
		if err == nil {
			_ = c.Close()
			break
		}
		select {
		case err := <-exited:
			t.Fatalf("pgbouncer exited: %v\n%s", err, b.log.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("pgbouncer did not listen on 127.0.0.1:%d: %v\n%s", port, err, b.log.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
	return b
}

func unprivilegedUser(t *testing.T) string {
	t.Helper()
	for _, name := range []string{"postgres", "nobody"} {
		if _, err := user.Lookup(name); err == nil {
			return name
		}
	}
	capability.Missing(t, capability.PgBouncer, "running as root and neither user postgres nor nobody exists for pgbouncer -u")
	return ""
}

// bouncerConfig is the pool configuration for db through the bouncer:
// the given exec mode and repo.RegisterTypes on every connection (the
// modes without a server round trip to describe a statement need to know
// that []uuid.UUID is uuid[]).
func bouncerConfig(t *testing.T, b *bouncer, db *pgtest.DB, mode pgx.QueryExecMode) *pgxpool.Config {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(b.url(db.Name))
	require.NoError(t, err)
	cfg.ConnConfig.DefaultQueryExecMode = mode
	cfg.AfterConnect = func(_ context.Context, c *pgx.Conn) error {
		repo.RegisterTypes(c.TypeMap())
		return nil
	}
	return cfg
}

// appPool connects to db through the bouncer with the given exec mode.
func appPool(t *testing.T, b *bouncer, db *pgtest.DB, mode pgx.QueryExecMode) *pgxpool.Pool {
	t.Helper()
	cfg := bouncerConfig(t, b, db, mode)
	cfg.MaxConns = 8
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	return pool
}

// TestTransitionsThroughPgBouncer runs the transition suite with the two
// exec modes that need no prepared statement to outlive a transaction.
func TestTransitionsThroughPgBouncer(t *testing.T) {
	b := startBouncer(t)
	for _, mode := range []pgx.QueryExecMode{pgx.QueryExecModeExec, pgx.QueryExecModeSimpleProtocol} {
		t.Run(mode.String(), func(t *testing.T) {
			db := pgtest.NewDB(t)
			app := appPool(t, b, db, mode)
			counts := testfactory.RunTransitions(t, &testfactory.TransitionEnv{App: app, Owner: db.Pool})
			t.Logf("calls through pgbouncer (pool_mode=transaction, %s): %d (%s)", mode, counts.Total(), counts)
		})
	}
}

// TestConcurrentTransitionsThroughPgBouncer interleaves many clients on few
// server connections (default_pool_size 10, 16 client connections), so
// consecutive statements of one client land on different server
// connections: what breaks session state such as prepared statements.
func TestConcurrentTransitionsThroughPgBouncer(t *testing.T) {
	b := startBouncer(t)
	for _, mode := range []pgx.QueryExecMode{pgx.QueryExecModeExec, pgx.QueryExecModeSimpleProtocol} {
		t.Run(mode.String(), func(t *testing.T) {
			errs, calls := concurrentLoad(t, b, mode)
			require.Zero(t, errs, "errors out of %d calls", calls)
			t.Logf("%s: %d concurrent calls, 0 errors", mode, calls)
		})
	}
}

// TestCachedStatementsMeasurement measures pgx's default exec mode
// (QueryExecModeCacheStatement: named prepared statements) through
// transaction pooling. It asserts nothing; run it with
// KFS_PGBOUNCER_MEASURE=1 to see the figure docs/RELIABILITY.md quotes.
func TestCachedStatementsMeasurement(t *testing.T) {
	if os.Getenv("KFS_PGBOUNCER_MEASURE") == "" {
		t.Skip("a measurement: set KFS_PGBOUNCER_MEASURE=1")
	}
	b := startBouncer(t)
	for _, mode := range []pgx.QueryExecMode{pgx.QueryExecModeCacheStatement, pgx.QueryExecModeCacheDescribe} {
		errs, calls := concurrentLoad(t, b, mode)
		t.Logf("%s: %d of %d calls failed", mode, errs, calls)
	}
}

// concurrentLoad runs 16 goroutines, each starting attempts and reading
// them back, and counts failed calls.
func concurrentLoad(t *testing.T, b *bouncer, mode pgx.QueryExecMode) (errs, calls int64) {
	t.Helper()
	ctx := context.Background()
	db := pgtest.NewDB(t)
	cfg := bouncerConfig(t, b, db, mode)
	cfg.MaxConns, cfg.MinConns = 16, 16
	app, err := pgxpool.NewWithConfig(ctx, cfg)
	require.NoError(t, err)
	defer app.Close()
	r := repo.New(nil)
	var failed, total atomic.Int64
	var wg sync.WaitGroup
	for range 16 {
		s := testfactory.NewScope(ctx, t, db.Pool, nil)
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 10 {
				total.Add(2)
				p := s.StartParams()
				res, err := r.Start(ctx, app, p)
				if err != nil {
					failed.Add(1)
					t.Logf("%s: start: %v", mode, err)
					continue
				}
				if _, err := r.Cancel(ctx, app, &repo.CancelParams{AttemptRef: s.Ref(res.Attempt.ID)}); err != nil {
					failed.Add(1)
					t.Logf("%s: cancel: %v", mode, err)
				}
			}
			total.Add(1)
			if _, err := r.CountLiveAttempts(ctx, app, &repo.CountLiveAttemptsParams{TenantID: s.TenantID}); err != nil {
				failed.Add(1)
			}
		}()
	}
	wg.Wait()
	return failed.Load(), total.Load()
}
