package bench

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/knowledgefs/kfsdb/migrate"
	"github.com/knowledgefs/kfsdb/pgsource"
	"github.com/knowledgefs/kfsdb/repo"
	"github.com/knowledgefs/kfsdb/tests/scratch"
	"github.com/knowledgefs/kfsdb/worker"
)

// drainSlots is the worker slots of both sides, as in make bench-lifecycle.
const drainSlots = 8

// BenchmarkDrainGrowth drains the same backlog (insertBacklog: due
// attempts as Start leaves them, spread over tenants, beside terminal
// history) with kfsdb's worker (pgsource, 8 slots, a handler that completes
// through every checkpoint, the completer batching) and with the seed
// schema's floor (drainFloor: the least the two rows allow, in
// ../shared/bench/lifecyclefloor's runtime shape), each in a database of
// its own, as the backlog (10^3 to 10^5 due attempts), the tenants with due
// rows (1 to 10^4) and the history (10^6 terminal attempts) grow
// (growthPoints: the one-tenant, 10^4 point comes three times). One CSV
// line per point: "drain-growth,<dimension>,<value>,<kfsdb /s>,<floor /s>,<ratio>".
// Not in make bench (about ten minutes): `go test -run '^$' -bench
// DrainGrowth -benchtime 1x ./bench/` in tests/, with
// KFS_BENCH_DATABASE_URL on an fsync-on server for figures.
func BenchmarkDrainGrowth(b *testing.B) {
	requireEnv(b)
	if b.N > 1 {
		b.Skip("measured once")
	}
	ctx := context.Background()
	for _, p := range growthPoints {
		k, err := measureDrain(ctx, drainKfsdb(pgsource.Config{}), p.tenants, p.backlog, p.history)
		if err != nil {
			b.Fatalf("kfsdb %s=%d: %v", p.dimension, p.value, err)
		}
		f, err := measureDrain(ctx, drainFloor, p.tenants, p.backlog, p.history)
		if err != nil {
			b.Fatalf("floor %s=%d: %v", p.dimension, p.value, err)
		}
		fmt.Printf("drain-growth,%s,%d,%.0f,%.0f,%.2f\n", p.dimension, p.value, k, f, k/f)
	}
}

// drainSide drains a migrated database holding backlog due attempts and
// returns when every one succeeded, with the time from the first lease.
type drainSide func(ctx context.Context, url string, cands map[string]candidate, backlog int) (time.Duration, error)

// measureDrain builds a database of its own with the backlog (statistics
// taken on it, autovacuum off for the two tables, as FetchBudget), drains
// it with side and returns attempts per second.
func measureDrain(ctx context.Context, side drainSide, tenants, backlog, history int) (float64, error) {
	name := scratch.RandomName("kfsdrain")
	url, err := env.srv.CreateDatabase(ctx, name, "")
	if err != nil {
		return 0, err
	}
	defer func() { _ = env.srv.DropDatabase(context.Background(), name) }()
	if _, err := migrate.Up(ctx, url); err != nil {
		return 0, err
	}
	seed, err := pgxpool.New(ctx, url)
	if err != nil {
		return 0, err
	}
	cands, err := insertBacklog(ctx, seed, tenants, backlog, history, true)
	if err == nil {
		_, err = seed.Exec(ctx, "CHECKPOINT")
	}
	seed.Close()
	if err != nil {
		return 0, err
	}
	took, err := side(ctx, url, cands, backlog)
	if err != nil {
		return 0, err
	}
	return float64(backlog) / took.Seconds(), nil
}

// drainPool is a pool of slots + 4 connections, each connected before the
// clock starts.
func drainPool(ctx context.Context, url string) (*pgxpool.Pool, error) {
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, err
	}
	cfg.MaxConns, cfg.MinConns = drainSlots+4, drainSlots+4
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, err
	}
	if err := pool.Ping(ctx); err != nil {
		pool.Close()
		return nil, err
	}
	return pool, nil
}

// drainKfsdb is a drainSide running a worker.Worker fed by a
// pgsource.Source (scfg, its Repo set here; the worker with its defaults)
// until no attempt is left unfinished.
func drainKfsdb(scfg pgsource.Config) drainSide {
	return func(ctx context.Context, url string, cands map[string]candidate, backlog int) (time.Duration, error) {
		return drainKfsdbWith(ctx, url, cands, backlog, scfg)
	}
}

func drainKfsdbWith(ctx context.Context, url string, cands map[string]candidate, backlog int, scfg pgsource.Config) (time.Duration, error) {
	pool, err := drainPool(ctx, url)
	if err != nil {
		return 0, err
	}
	defer pool.Close()
	r := repo.New(nil)
	scfg.Repo = r
	src, err := pgsource.New(pool, &scfg)
	if err != nil {
		return 0, err
	}
	var first atomic.Int64 // unix nanoseconds of the first handler call
	var handled atomic.Int64
	h := worker.HandlerFunc(func(_ context.Context, job *worker.Job) error {
		first.CompareAndSwap(0, time.Now().UnixNano())
		c, ok := cands[job.Attempt.TenantID]
		if !ok {
			return worker.Fatal("DRAIN_UNKNOWN_TENANT", fmt.Errorf("tenant %q is not the backlog's", job.Attempt.TenantID))
		}
		job.CompleteThrough(c.id, c.fingerprint)
		handled.Add(1)
		return nil
	})
	wk, err := worker.New(pool, src, h, &worker.Config{Repo: r, Concurrency: drainSlots})
	if err != nil {
		return 0, err
	}
	wctx, stop := context.WithCancel(ctx)
	defer stop()
	ran := make(chan error, 1)
	go func() { ran <- wk.Run(wctx) }()
	// The handler has run for every attempt; the last completions commit
	// within a few milliseconds: done when no outbox row is leased.
	deadline := time.Now().Add(10 * time.Minute)
	tick := time.NewTicker(2 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case err := <-ran:
			return 0, fmt.Errorf("worker stopped: %v", err)
		case <-tick.C:
		}
		if time.Now().After(deadline) {
			return 0, fmt.Errorf("drain: %d of %d handled after 10 minutes", handled.Load(), backlog)
		}
		if handled.Load() < int64(backlog) {
			continue
		}
		var leased bool
		if err := pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM document_compilation_outbox WHERE status = 'leased')`).Scan(&leased); err != nil {
			return 0, err
		}
		if !leased {
			took := time.Since(time.Unix(0, first.Load()))
			stop()
			if err := <-ran; err != nil && !errors.Is(err, context.Canceled) {
				return 0, err
			}
			return took, checkDrained(ctx, pool, cands, backlog)
		}
	}
}

// checkDrained fails unless every attempt of the backlog (its tenants'
// attempts: the history beside is other tenants') succeeded.
func checkDrained(ctx context.Context, db *pgxpool.Pool, cands map[string]candidate, backlog int) error {
	tenants := make([]string, 0, len(cands))
	for t := range cands {
		tenants = append(tenants, t)
	}
	var succeeded int
	if err := db.QueryRow(ctx, `SELECT count(*) FROM document_compilation_attempts WHERE run_state = 'succeeded' AND tenant_id = ANY($1)`,
		tenants).Scan(&succeeded); err != nil {
		return err
	}
	if succeeded != backlog {
		return fmt.Errorf("drain: %d of %d attempts succeeded", succeeded, backlog)
	}
	return nil
}

// The floor's statements: the due outbox rows oldest first by
// delivery_due_idx, locked without waiting, both rows moved in the same
// statement; the completion moves both rows with the candidate bound (its
// foreign key checked). No fairness, fencing, exhaustion or wake-up.
const (
	floorFetchSQL = `
WITH due AS (
  SELECT o.id FROM document_compilation_outbox o
   WHERE o.status = 'pending' AND o.available_at <= now()
   ORDER BY o.status, o.available_at
   LIMIT $1 FOR UPDATE SKIP LOCKED),
outbox AS (
  UPDATE document_compilation_outbox o
     SET status = 'leased', available_at = now() + interval '30 seconds', dispatch_attempts = o.dispatch_attempts + 1,
         delivered_at = now(), queue_job_id = o.id::text, updated_at = now()
    FROM due WHERE o.id = due.id
  RETURNING o.attempt_id, o.queue_job_id)
UPDATE document_compilation_attempts a
   SET run_state = 'running', execution_attempts = a.execution_attempts + 1, worker_id = $2,
       lease_token = gen_random_uuid(), lease_expires_at = now() + interval '30 seconds', heartbeat_at = now(),
       started_at = coalesce(a.started_at, now()), queue_job_id = outbox.queue_job_id,
       row_version = a.row_version + 1, updated_at = now()
  FROM outbox WHERE a.id = outbox.attempt_id
RETURNING a.id, a.tenant_id`
	floorCompleteSQL = `
WITH done AS (
  UPDATE document_compilation_attempts a
     SET run_state = 'succeeded', checkpoint = 'published', active_slot = NULL, completed_at = now(),
         worker_id = NULL, lease_token = NULL, lease_expires_at = NULL, heartbeat_at = NULL,
         candidate_publication_id = c.publication, candidate_fingerprint = c.fingerprint,
         row_version = a.row_version + 1, updated_at = now()
    FROM unnest($1::uuid[], $2::uuid[], $3::text[]) AS c(id, publication, fingerprint)
   WHERE a.id = c.id AND a.run_state = 'running'
  RETURNING a.id)
UPDATE document_compilation_outbox o SET status = 'completed', updated_at = now()
  FROM done WHERE o.attempt_id = done.id`
)

// drainFloor drains with the floor's statements in lifecyclefloor's
// runtime shape: one fetcher taking up to the free slots' worth (1 ms
// between empty fetches), a no-op handler whose slot is free at once, one
// completer sending up to 100 completions per statement. The project's
// triggers are disabled, as lifecyclefloor does.
func drainFloor(ctx context.Context, url string, cands map[string]candidate, backlog int) (time.Duration, error) {
	pool, err := drainPool(ctx, url)
	if err != nil {
		return 0, err
	}
	defer pool.Close()
	for _, s := range []string{
		`ALTER TABLE document_compilation_outbox DISABLE TRIGGER USER`,
		`ALTER TABLE document_compilation_attempts DISABLE TRIGGER USER`,
	} {
		if _, err := pool.Exec(ctx, s); err != nil {
			return 0, err
		}
	}
	type leased struct {
		id     uuid.UUID
		tenant string
	}
	slots := make(chan struct{}, drainSlots)
	for range drainSlots {
		slots <- struct{}{}
	}
	done := make(chan leased, backlog)
	fctx, stop := context.WithCancel(ctx)
	defer stop()
	var wg sync.WaitGroup
	var fetchErr error
	var first time.Time
	wg.Go(func() {
		for fctx.Err() == nil {
			free := 0
			select {
			case <-slots:
				free = 1
			case <-fctx.Done():
				return
			}
		more:
			for {
				select {
				case <-slots:
					free++
				default:
					break more
				}
			}
			rows, _ := pool.Query(fctx, floorFetchSQL, free, benchWorker)
			got, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (leased, error) {
				var l leased
				return l, row.Scan(&l.id, &l.tenant)
			})
			if err != nil {
				if fctx.Err() == nil {
					fetchErr = err
					stop()
				}
				return
			}
			if len(got) > 0 && first.IsZero() {
				first = time.Now()
			}
			for _, l := range got {
				slots <- struct{}{} // the no-op handler
				done <- l
			}
			for range free - len(got) {
				slots <- struct{}{}
			}
			if len(got) == 0 {
				time.Sleep(time.Millisecond)
			}
		}
	})
	completed := 0
	ids, pubs, fps := make([]uuid.UUID, 0, 100), make([]uuid.UUID, 0, 100), make([]string, 0, 100)
	for completed < backlog {
		var l leased
		select {
		case l = <-done:
		case <-fctx.Done():
			wg.Wait()
			return 0, fmt.Errorf("floor fetch: %v", fetchErr)
		}
		// This completion and those that came meanwhile, up to 100.
		ids, pubs, fps = ids[:0], pubs[:0], fps[:0]
	fill:
		for {
			c := cands[l.tenant]
			ids, pubs, fps = append(ids, l.id), append(pubs, c.id), append(fps, c.fingerprint)
			if len(ids) == 100 {
				break
			}
			select {
			case l = <-done:
			default:
				break fill
			}
		}
		tag, err := pool.Exec(ctx, floorCompleteSQL, ids, pubs, fps)
		if err != nil {
			stop()
			wg.Wait()
			return 0, fmt.Errorf("floor complete: %w", err)
		}
		completed += int(tag.RowsAffected())
	}
	end := time.Now()
	stop()
	wg.Wait()
	return end.Sub(first), checkDrained(ctx, pool, cands, backlog)
}
