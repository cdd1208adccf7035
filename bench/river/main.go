// Command river measures River end to end on a PostgreSQL server: P
// producers each insert one job per transaction (client.Insert on the
// pool), a River client with W worker slots runs a no-op worker, for T
// seconds. It prints jobs/s (completed within the window) and p50/p99 of
// insert → completed, like bench/kfsdb-bench/loadgen does for kfsdb.
//
//	go run . -url "$KFS_BENCH_DATABASE_URL" -producers 8 -workers 8 -seconds 10
//
// It creates a database kfsriver_<random> on the server, migrates River
// into it, and drops it afterwards.
package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"flag"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivermigrate"
)

type noopArgs struct {
	Seq int64 `json:"seq"`
}

func (noopArgs) Kind() string { return "noop" }

type noopWorker struct {
	river.WorkerDefaults[noopArgs]
}

func (noopWorker) Work(context.Context, *river.Job[noopArgs]) error { return nil }

func main() {
	adminURL := flag.String("url", os.Getenv("KFS_BENCH_DATABASE_URL"), "server URL (a database to run CREATE DATABASE in)")
	producers := flag.Int("producers", 8, "goroutines inserting one job per transaction")
	workers := flag.Int("workers", 8, "River MaxWorkers of the default queue")
	seconds := flag.Int("seconds", 10, "how long the producers run")
	cooldown := flag.Duration("fetch-cooldown", 0, "River FetchCooldown (0: River's default)")
	rate := flag.Float64("rate", 0, "jobs inserted per second by all producers together (0: as fast as they can)")
	flag.Parse()
	if err := run(*adminURL, *producers, *workers, time.Duration(*seconds)*time.Second, *cooldown, *rate); err != nil {
		fmt.Fprintln(os.Stderr, "river:", err)
		os.Exit(1)
	}
}

func run(adminURL string, producers, workers int, dur, cooldown time.Duration, rate float64) error {
	ctx := context.Background()
	if adminURL == "" {
		return fmt.Errorf("-url or KFS_BENCH_DATABASE_URL is required")
	}
	admin, err := pgx.Connect(ctx, adminURL)
	if err != nil {
		return err
	}
	defer admin.Close(ctx)
	var b [6]byte
	_, _ = rand.Read(b[:])
	name := "kfsriver_" + hex.EncodeToString(b[:])
	if _, err := admin.Exec(ctx, "CREATE DATABASE "+name); err != nil {
		return err
	}
	defer admin.Exec(context.Background(), "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)") //nolint:errcheck
	u, err := url.Parse(adminURL)
	if err != nil {
		return err
	}
	u.Path = "/" + name
	cfg, err := pgxpool.ParseConfig(u.String())
	if err != nil {
		return err
	}
	cfg.MaxConns = int32(producers + workers + 4)
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return err
	}
	defer pool.Close()
	migrator, err := rivermigrate.New(riverpgxv5.New(pool), nil)
	if err != nil {
		return err
	}
	if _, err := migrator.Migrate(ctx, rivermigrate.DirectionUp, nil); err != nil {
		return err
	}

	var started atomic.Int64
	ws := river.NewWorkers()
	river.AddWorker(ws, &noopWorker{})
	rcfg := &river.Config{
		Logger:  slog.New(slog.DiscardHandler),
		Queues:  map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: workers}},
		Workers: ws,
	}
	if cooldown > 0 {
		rcfg.FetchCooldown = cooldown
	}
	client, err := river.NewClient(riverpgxv5.New(pool), rcfg)
	if err != nil {
		return err
	}
	if err := client.Start(ctx); err != nil {
		return err
	}
	// The same start as kfsdb's load driver: a checkpoint (best effort),
	// then every pool connection open before the window.
	_, _ = pool.Exec(ctx, "CHECKPOINT")
	if err := warmPool(ctx, pool); err != nil {
		return err
	}
	// Warm-up, as kfsdb's load driver does: two jobs per producer, done
	// before the window and left out of every figure (created before it).
	warm := 2 * producers
	for i := range warm {
		if _, err := client.Insert(ctx, noopArgs{Seq: -int64(i) - 1}, nil); err != nil {
			return err
		}
	}
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(5 * time.Millisecond) {
		var n int
		if err := pool.QueryRow(ctx, "SELECT count(*) FROM river_job WHERE state = 'completed'").Scan(&n); err != nil {
			return err
		}
		if n >= warm {
			break
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("warm-up: %d of %d jobs completed", n, warm)
		}
	}
	var dbBegin time.Time
	var walBegin string
	if err := pool.QueryRow(ctx, "SELECT clock_timestamp(), pg_current_wal_lsn()::text").Scan(&dbBegin, &walBegin); err != nil {
		return err
	}
	cpuBegin := serverCPU()
	begin := time.Now()
	end := begin.Add(dur)
	var seq atomic.Int64
	var wg sync.WaitGroup
	var insErr atomic.Pointer[error]
	for range producers {
		wg.Go(func() {
			for time.Now().Before(end) {
				s := seq.Add(1)
				if rate > 0 {
					// Paced: job s is due at begin + (s-1)/rate, whoever inserts it.
					time.Sleep(time.Until(begin.Add(time.Duration(float64(s-1) / rate * float64(time.Second)))))
					if !time.Now().Before(end) {
						return
					}
				}
				if _, err := client.Insert(ctx, noopArgs{Seq: s}, nil); err != nil {
					insErr.Store(&err)
					return
				}
				started.Add(1)
			}
		})
	}
	wg.Wait()
	if p := insErr.Load(); p != nil {
		return *p
	}
	var dbEnd time.Time
	if err := pool.QueryRow(ctx, "SELECT clock_timestamp()").Scan(&dbEnd); err != nil {
		return err
	}
	drained := false
	for deadline := time.Now().Add(2 * time.Minute); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		var left int64
		if err := pool.QueryRow(ctx, "SELECT count(*) FROM river_job WHERE state <> 'completed'").Scan(&left); err != nil {
			return err
		}
		if left == 0 {
			drained = true
			break
		}
	}
	cpuEnd := serverCPU()
	var walBytes float64
	if err := pool.QueryRow(ctx, "SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), $1::pg_lsn)", walBegin).Scan(&walBytes); err != nil {
		return err
	}
	sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	_ = client.Stop(sctx)

	// River's own timestamps (server clock): created_at at insert,
	// finalized_at when the completer recorded the completion.
	var inWindow, completed int64
	var p50, p99 float64
	if err := pool.QueryRow(ctx, `SELECT count(*) FILTER (WHERE finalized_at <= $1), count(*),
		coalesce(percentile_disc(0.5) WITHIN GROUP (ORDER BY extract(epoch FROM finalized_at - created_at)), 0),
		coalesce(percentile_disc(0.99) WITHIN GROUP (ORDER BY extract(epoch FROM finalized_at - created_at)), 0)
		FROM river_job WHERE state = 'completed' AND created_at >= $2`, dbEnd, dbBegin).Scan(&inWindow, &completed, &p50, &p99); err != nil {
		return err
	}
	sec := func(f float64) time.Duration { return time.Duration(f * float64(time.Second)).Round(time.Millisecond) }
	fmt.Printf("| River %s | producers %d | worker slots %d | %s | fetch cooldown %s | offered rate %s |\n", riverVersion(), producers, workers, dur, cooldownString(cooldown), rateString(rate))
	fmt.Printf("| jobs inserted / completed (drained: %v) | %d / %d |\n", drained, started.Load(), completed)
	fmt.Printf("| throughput (completed within the window) | %.0f jobs/s |\n", float64(inWindow)/dbEnd.Sub(dbBegin).Seconds())
	// The jobs completed after the window over the time they took: the
	// workers' rate with no producers competing, as kfsdb bench reports.
	var drainedJobs int64
	var drainSeconds float64
	if err := pool.QueryRow(ctx, `SELECT count(*), coalesce(extract(epoch FROM max(finalized_at) - $1), 0)
		FROM river_job WHERE state = 'completed' AND finalized_at > $1 AND created_at >= $2`, dbEnd, dbBegin).Scan(&drainedJobs, &drainSeconds); err != nil {
		return err
	}
	if drainedJobs > 0 && drainSeconds > 0 {
		fmt.Printf("| drain after the window (no producers) | %.0f jobs/s |\n", float64(drainedJobs)/drainSeconds)
	}
	// The same jobs to the commit of their completion: River's executor
	// stamps finalized_at when the worker returns, before its batch
	// completer commits, so finalized_at alone is not comparable with a
	// completion stamped (or measured) at its commit. Needs
	// track_commit_timestamp = on.
	var c50, c99 float64
	var tracked bool
	if err := pool.QueryRow(ctx, `SELECT current_setting('track_commit_timestamp')::boolean`).Scan(&tracked); err != nil {
		return err
	}
	if tracked {
		if err := pool.QueryRow(ctx, `SELECT
			coalesce(percentile_disc(0.5) WITHIN GROUP (ORDER BY extract(epoch FROM pg_xact_commit_timestamp(xmin) - created_at)), 0),
			coalesce(percentile_disc(0.99) WITHIN GROUP (ORDER BY extract(epoch FROM pg_xact_commit_timestamp(xmin) - created_at)), 0)
			FROM river_job WHERE state = 'completed' AND created_at >= $1`, dbBegin).Scan(&c50, &c99); err != nil {
			return err
		}
		fmt.Printf("| insert → completed committed p50 / p99 | %s / %s |\n", sec(c50), sec(c99))
	}
	fmt.Printf("| insert → finalized_at p50 / p99 (River's executor stamp, before its completer commits) | %s / %s |\n", sec(p50), sec(p99))
	if completed > 0 {
		fmt.Printf("| WAL bytes per job | %.0f |\n", walBytes/float64(completed))
		if cpuBegin >= 0 && cpuEnd >= 0 {
			fmt.Printf("| PostgreSQL CPU per job | %.0f µs |\n", float64(cpuEnd-cpuBegin)/1e3/float64(completed))
		}
	}
	return nil
}

func rateString(r float64) string {
	if r == 0 {
		return "unpaced"
	}
	return fmt.Sprintf("%.0f/s", r)
}

func cooldownString(d time.Duration) string {
	if d == 0 {
		return "default"
	}
	return d.String()
}
