package faults_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/knowledgefs/kfsdb/kfstype"
	"github.com/knowledgefs/kfsdb/repo"
	"github.com/knowledgefs/kfsdb/tests/faultload"
	"github.com/knowledgefs/kfsdb/tests/pgtest"
	"github.com/knowledgefs/kfsdb/tests/testfactory"
)

// requireTransient requires that err is a connection error as callers see
// it: not nil, retryable, and none of the state sentinels.
func requireTransient(t testing.TB, err error, call string) {
	t.Helper()
	require.Error(t, err, "%s on a killed connection", call)
	require.True(t, repo.IsRetryable(err), "%s: %v is not retryable", call, err)
	require.NoError(t, faultload.ReadsAsState(err), "%s: connection error %v reads as a state", call, err)
}

// TestConnectionErrorsSurfaceAsRetryable calls transitions on a connection
// whose backend was just killed with pg_terminate_backend, and each write
// on a read-only connection (25006, a demoted primary): each returns an
// error that repo.IsRetryable accepts and that matches no state sentinel,
// and the same call on a healthy pool then succeeds.
func TestConnectionErrorsSurfaceAsRetryable(t *testing.T) {
	ctx := context.Background()
	db := pgtest.NewDB(t)
	r := repo.New(nil)
	drv := &testfactory.Driver{Repo: r, DB: db.Pool}

	// killed returns a connection whose backend has been terminated.
	killed := func(t *testing.T) *pgx.Conn {
		t.Helper()
		conn, err := pgx.Connect(ctx, db.URL)
		require.NoError(t, err)
		t.Cleanup(func() { _ = conn.Close(context.Background()) })
		pid := conn.PgConn().PID()
		var ok bool
		require.NoError(t, db.Pool.QueryRow(ctx, `SELECT pg_terminate_backend($1, 5000)`, pid).Scan(&ok))
		require.True(t, ok)
		return conn
	}

	// readOnly returns a connection on which every write is refused with
	// 25006 read_only_sql_transaction, as on a primary demoted in a
	// failover whose connections live on.
	readOnly := func(t *testing.T) *pgx.Conn {
		t.Helper()
		conn, err := pgx.Connect(ctx, db.URL)
		require.NoError(t, err)
		t.Cleanup(func() { _ = conn.Close(context.Background()) })
		_, err = conn.Exec(ctx, `SET default_transaction_read_only = on`)
		require.NoError(t, err)
		return conn
	}

	scope := testfactory.NewScope(ctx, t, db.Pool, nil)
	running := testfactory.NewScope(ctx, t, db.Pool, nil)
	_, lease, _ := drv.Running(ctx, t, running, nil)
	candID, candFP := running.Publication(ctx, t, db.Pool, "candidate")
	var started *repo.StartResult

	steps := []struct {
		name string
		call func(ctx context.Context, db repo.DBTX) error
	}{
		{"Start", func(ctx context.Context, db repo.DBTX) (err error) {
			started, err = r.Start(ctx, db, scope.StartParams())
			return err
		}},
		{"GetAttempt", func(ctx context.Context, db repo.DBTX) error {
			_, err := r.GetAttempt(ctx, db, &repo.GetAttemptParams{TenantID: scope.TenantID, AttemptID: started.Attempt.ID})
			return err
		}},
		{"ClaimOutbox", func(ctx context.Context, db repo.DBTX) error {
			_, err := r.ClaimOutbox(ctx, db, &repo.ClaimOutboxParams{RelayID: "probe", BatchSize: 1})
			return err
		}},
		{"Heartbeat", func(ctx context.Context, db repo.DBTX) error {
			renewed, err := r.Heartbeat(ctx, db, &repo.HeartbeatParams{Lease: lease})
			if err == nil {
				lease = renewed
			}
			return err
		}},
		{"Advance", func(ctx context.Context, db repo.DBTX) error {
			_, err := r.Advance(ctx, db, &repo.AdvanceParams{Lease: lease, Checkpoint: kfstype.CheckpointParsed})
			return err
		}},
		{"AdvanceTo", func(ctx context.Context, db repo.DBTX) error {
			_, err := r.AdvanceTo(ctx, db, &repo.AdvanceToParams{Lease: lease, Checkpoint: kfstype.CheckpointNodesGenerated})
			return err
		}},
		{"CompleteThrough", func(ctx context.Context, db repo.DBTX) error {
			_, err := r.CompleteThrough(ctx, db, &repo.CompleteThroughParams{Lease: lease, CandidatePublicationID: &candID, CandidateFingerprint: &candFP})
			return err
		}},
		{"Cancel", func(ctx context.Context, db repo.DBTX) error {
			_, err := r.Cancel(ctx, db, &repo.CancelParams{AttemptRef: scope.Ref(started.Attempt.ID)})
			return err
		}},
	}
	for _, s := range steps {
		t.Run(s.name, func(t *testing.T) {
			requireTransient(t, s.call(ctx, killed(t)), s.name)
			if s.name != "GetAttempt" { // a read: a read-only server answers it
				requireTransient(t, s.call(ctx, readOnly(t)), s.name+" on a read-only server")
			}
			require.NoError(t, s.call(ctx, db.Pool), "%s retried on a healthy pool", s.name)
		})
	}
	require.True(t, started.Created)
	testfactory.RequireInvariants(ctx, t, db.Pool, started.Attempt.ID)
	testfactory.RequireInvariants(ctx, t, db.Pool, lease.AttemptID)
}

// TestBackendKillsDuringLoad kills random backends of the test database
// (each with probability 1/2) every 200 ms for 3 s (30 s with KFS_SOAK=1)
// during a load run, on every delivery path.
func TestBackendKillsDuringLoad(t *testing.T) {
	window := 3 * time.Second
	if soak() {
		window = 30 * time.Second
	}
	eachPath(t, func(t *testing.T, path faultload.Path) {
		var rounds, killed int
		rep := runLoad(t, path, nil, "backend kills", func(ctx context.Context, db *pgtest.DB, _ *faultload.Run) {
			killer := faultload.NewPool(t, db.URL, 1)
			end := time.Now().Add(window)
			for time.Now().Before(end) {
				var n int
				err := killer.QueryRow(ctx, `
					SELECT count(*) FILTER (WHERE pg_terminate_backend(pid))
					  FROM pg_stat_activity
					 WHERE datname = $1 AND pid <> pg_backend_pid() AND random() < 0.5`, db.Name).Scan(&n)
				require.NoError(t, err)
				rounds++
				killed += n
				time.Sleep(200 * time.Millisecond)
			}
		})
		require.Positive(t, killed)
		require.Positive(t, rep.Transient, "the kills never reached a caller")
		t.Logf("FIGURES backend kills, %s: %d rounds over %s, %d backends killed; %s", path, rounds, window, killed, rep)
	})
}

// TestServerRestartDuringLoad restarts the PostgreSQL server in the middle
// of a load run (three times, 5 s apart, with KFS_SOAK=1), on every
// delivery path.
func TestServerRestartDuringLoad(t *testing.T) {
	srv := requireContainer(t)
	restarts := 1
	if soak() {
		restarts = 3
	}
	eachPath(t, func(t *testing.T, path faultload.Path) {
		var downtimes []time.Duration
		rep := runLoad(t, path, nil, "restart", func(ctx context.Context, _ *pgtest.DB, run *faultload.Run) {
			for i := range restarts {
				if i > 0 {
					time.Sleep(5 * time.Second)
					run.MarkFault("restart")
				}
				start := time.Now()
				require.NoError(t, srv.Restart(ctx))
				downtimes = append(downtimes, time.Since(start).Round(100*time.Millisecond))
			}
		})
		require.Positive(t, rep.Transient, "the restart never reached a caller")
		t.Logf("FIGURES server restarts, %s: %d (stop to accepting connections: %v); %s", path, restarts, downtimes, rep)
	})
}

// TestServerCrashDuringLoad kills the PostgreSQL server outright (SIGKILL:
// no shutdown checkpoint, the WAL buffers lost) in the middle of a load
// run, with synchronous commits and with AsyncProgressCommits, whose
// claims, marks, leases, heartbeats and checkpoints not yet flushed are
// forgotten by the crash, on every delivery path. Either way every attempt
// succeeds exactly once and the rows, leases and fences check out: a
// forgotten progress write is redone like the work of a lost relay or
// worker.
func TestServerCrashDuringLoad(t *testing.T) {
	srv := requireContainer(t)
	for _, async := range []bool{false, true} {
		t.Run(map[bool]string{false: "SyncCommits", true: "AsyncProgressCommits"}[async], func(t *testing.T) {
			eachPath(t, func(t *testing.T, path faultload.Path) {
				var downtime time.Duration
				rep := runLoad(t, path, &repo.Config{AsyncProgressCommits: async}, "crash", func(ctx context.Context, _ *pgtest.DB, _ *faultload.Run) {
					start := time.Now()
					require.NoError(t, srv.Crash(ctx))
					downtime = time.Since(start).Round(100 * time.Millisecond)
				})
				require.Positive(t, rep.Transient, "the crash never reached a caller")
				t.Logf("FIGURES server crash (SIGKILL), %s, async progress commits %v: kill to accepting connections %v; %s", path, async, downtime, rep)
			})
		})
	}
}

// TestServerOutageDuringLoad kills the server and keeps it down for 6 s
// (30 s with KFS_SOAK=1), three leases and longer than any call's
// timeout, before starting it again, on every delivery path: the single
// server's form of a primary that dies before a standby is promoted, with
// every connection refused meanwhile. Nothing may hang, no error may be
// anything but retryable, and once the server is back every attempt
// succeeds exactly once.
func TestServerOutageDuringLoad(t *testing.T) {
	srv := requireContainer(t)
	down := 6 * time.Second
	if soak() {
		down = 30 * time.Second
	}
	eachPath(t, func(t *testing.T, path faultload.Path) {
		var outage time.Duration
		rep := runLoad(t, path, nil, "outage", func(ctx context.Context, _ *pgtest.DB, _ *faultload.Run) {
			start := time.Now()
			require.NoError(t, srv.Outage(ctx, down))
			outage = time.Since(start).Round(100 * time.Millisecond)
		})
		require.Positive(t, rep.Transient, "the outage never reached a caller")
		t.Logf("FIGURES server outage, %s: down %s (kill to accepting connections %s); %s", path, down, outage, rep)
	})
}

// TestCrashForgetsAsyncLease shows what AsyncProgressCommits trades: a
// lease committed asynchronously and killed with the server before the
// WAL writer flushed it (wal_writer_delay raised to 10 s for the test) is
// gone after crash recovery — the attempt is queued again with its
// execution attempt uncounted, as if the worker had never taken it — and
// the same delivery then takes a fresh lease and completes. The start and
// the dispatch before it committed synchronously and survive.
func TestCrashForgetsAsyncLease(t *testing.T) {
	srv := requireContainer(t)
	ctx := context.Background()
	db := pgtest.NewDB(t)
	admin, err := pgx.Connect(ctx, srv.AdminURL())
	require.NoError(t, err)
	setWALWriterDelay := func(v string) {
		if admin.IsClosed() {
			// The crash broke the first connection.
			admin, err = pgx.Connect(ctx, srv.AdminURL())
			require.NoError(t, err)
		}
		_, err := admin.Exec(ctx, "ALTER SYSTEM SET wal_writer_delay = '"+v+"'")
		require.NoError(t, err)
		_, err = admin.Exec(ctx, "SELECT pg_reload_conf()")
		require.NoError(t, err)
	}
	setWALWriterDelay("10s")
	t.Cleanup(func() {
		_ = admin.Close(ctx)
		admin, err = pgx.Connect(ctx, srv.AdminURL())
		require.NoError(t, err)
		setWALWriterDelay("200ms")
	})

	syncRepo := repo.New(nil)
	asyncRepo := repo.New(&repo.Config{AsyncProgressCommits: true})
	drv := &testfactory.Driver{Repo: syncRepo, DB: db.Pool}
	s := testfactory.NewScope(ctx, t, db.Pool, nil)
	a := drv.Start(ctx, t, s, nil)
	del := drv.Dispatch(ctx, t, a.ID, nil)

	running, _, err := asyncRepo.AcquireLease(ctx, db.Pool, &repo.AcquireLeaseParams{Delivery: *del, WorkerID: "worker-async"})
	require.NoError(t, err)
	require.Equal(t, kfstype.RunStateRunning, running.RunState, "the async lease is visible at once")
	require.NoError(t, srv.Crash(ctx))

	db.Pool.Reset() // drop the connections the crash broke
	after, err := syncRepo.GetAttempt(ctx, db.Pool, &repo.GetAttemptParams{TenantID: s.TenantID, AttemptID: a.ID})
	require.NoError(t, err)
	require.Equal(t, kfstype.RunStateQueued, after.RunState, "the unflushed lease is forgotten")
	require.Zero(t, after.ExecutionAttempts)
	require.Nil(t, after.LeaseToken)
	require.Equal(t, del.QueueJobID, *after.QueueJobID, "the synchronous dispatch survived")

	_, lease, err := asyncRepo.AcquireLease(ctx, db.Pool, &repo.AcquireLeaseParams{Delivery: *del, WorkerID: "worker-again"})
	require.NoError(t, err, "the same delivery leases the attempt again")
	drv.AdvanceTo(ctx, t, s, lease, kfstype.CheckpointSmokeEvalPassed)
	done, err := syncRepo.Complete(ctx, db.Pool, &repo.CompleteParams{Lease: lease})
	require.NoError(t, err)
	require.Equal(t, kfstype.RunStateSucceeded, done.RunState)
	require.Equal(t, int32(1), done.ExecutionAttempts)
	testfactory.RequireInvariants(ctx, t, db.Pool, a.ID)
}

// TestServerPauseDuringLoad freezes the server (docker pause) for 3.5 s,
// longer than the 2 s lease, in the middle of a load run (three times with
// KFS_SOAK=1), on every delivery path. While it is frozen every handler is
// stopped at its lease's expiry (the heartbeat gives up then), a call with
// a deadline returns a retryable error, and after it the attempts whose
// leases expired are delivered again (by the relay, or fetched again by
// pgsource).
func TestServerPauseDuringLoad(t *testing.T) {
	srv := requireContainer(t)
	const pause = 3500 * time.Millisecond
	pauses := 1
	if soak() {
		pauses = 3
	}
	eachPath(t, func(t *testing.T, path faultload.Path) {
		var stoppedWhilePaused []int64
		rep := runLoad(t, path, nil, "pause", func(ctx context.Context, _ *pgtest.DB, run *faultload.Run) {
			for i := range pauses {
				if i > 0 {
					time.Sleep(5 * time.Second)
					run.MarkFault("pause")
				}
				before := run.HandlersStopped()
				require.NoError(t, srv.Pause(ctx))
				t.Cleanup(func() { _ = srv.Unpause(context.Background()) })
				start := time.Now()

				tenant, id := run.FirstAttempt()
				cctx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
				_, err := run.Repo().GetAttempt(cctx, run.Pool(), &repo.GetAttemptParams{TenantID: tenant, AttemptID: id})
				cancel()
				requireTransient(t, err, "GetAttempt on a frozen server")

				time.Sleep(pause - time.Since(start))
				stoppedWhilePaused = append(stoppedWhilePaused, run.HandlersStopped()-before)
				require.NoError(t, srv.Unpause(ctx))
				require.NoError(t, srv.WaitReady(ctx, 30*time.Second))
			}
		})
		for _, n := range stoppedWhilePaused {
			require.Positive(t, n, "no handler was stopped while the server was frozen past the lease")
		}
		require.Positive(t, rep.LeasesLost)
		t.Logf("FIGURES server pauses, %s: %d x %s (lease %s); handlers stopped at lease expiry while frozen: %v; %s",
			path, pauses, pause, leaseDuration, stoppedWhilePaused, rep)
	})
}
