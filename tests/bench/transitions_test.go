package bench

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/knowledgefs/kfsdb/repo"
)

// transition is one single-attempt transition under benchmark.
type transition struct {
	name string
	from state
	// call runs the transition through the Repo for fixture f.
	call func(ctx context.Context, r *repo.Repo, db repo.DBTX, fs *fixtureSet, f *fixture) error
	// done counts the attempts the transition has been applied to (a
	// sanity check that both variants did the work).
	done string
}

var lease0 = func(f *fixture) *repo.Lease { return f.lease() }

// transitions are the single-attempt transitions, each from the state it
// normally runs in.
var transitions = []transition{
	{
		name: "Start", from: state{},
		call: func(ctx context.Context, r *repo.Repo, db repo.DBTX, fs *fixtureSet, f *fixture) error {
			res, err := r.Start(ctx, db, &repo.StartParams{TenantID: benchTenant, KnowledgeSpaceID: fs.SpaceID,
				DocumentAssetID: f.AssetID, DocumentVersion: 1, PublicationGenerationID: fs.GenerationID})
			if err == nil && !res.Created {
				err = errors.New("start: not created")
			}
			return err
		},
		done: `SELECT count(*) FROM document_compilation_attempts`,
	},
	{
		name: "AcquireLease", from: state{"queued", "queued"},
		call: func(ctx context.Context, r *repo.Repo, db repo.DBTX, _ *fixtureSet, f *fixture) error {
			_, _, err := r.AcquireLease(ctx, db, &repo.AcquireLeaseParams{
				Delivery: repo.Delivery{AttemptID: f.AttemptID, QueueJobID: f.JobID}, WorkerID: benchWorker})
			return err
		},
		done: `SELECT count(*) FROM document_compilation_attempts WHERE run_state = 'running'`,
	},
	{
		name: "Heartbeat", from: state{"running", "parsed"},
		call: func(ctx context.Context, r *repo.Repo, db repo.DBTX, _ *fixtureSet, f *fixture) error {
			_, err := r.Heartbeat(ctx, db, &repo.HeartbeatParams{Lease: lease0(f)})
			return err
		},
		done: `SELECT count(*) FROM document_compilation_attempts WHERE row_version = 1`,
	},
	{
		name: "Advance", from: state{"running", "queued"},
		call: func(ctx context.Context, r *repo.Repo, db repo.DBTX, _ *fixtureSet, f *fixture) error {
			_, err := r.Advance(ctx, db, &repo.AdvanceParams{Lease: lease0(f), Checkpoint: "parsed"})
			return err
		},
		done: `SELECT count(*) FROM document_compilation_attempts WHERE checkpoint = 'parsed'`,
	},
	{
		name: "Complete", from: state{"running", "smoke_eval_passed"},
		call: func(ctx context.Context, r *repo.Repo, db repo.DBTX, _ *fixtureSet, f *fixture) error {
			_, err := r.Complete(ctx, db, &repo.CompleteParams{Lease: lease0(f)})
			return err
		},
		done: `SELECT count(*) FROM document_compilation_attempts WHERE run_state = 'succeeded'`,
	},
	{
		// The minimal lifecycle's completion: from queued, binding the
		// candidate on the way to published.
		name: "CompleteThrough", from: state{"running", "queued"},
		call: func(ctx context.Context, r *repo.Repo, db repo.DBTX, fs *fixtureSet, f *fixture) error {
			_, err := r.CompleteThrough(ctx, db, &repo.CompleteThroughParams{Lease: lease0(f),
				CandidatePublicationID: &fs.CandidateID, CandidateFingerprint: &fs.Fingerprint})
			return err
		},
		done: `SELECT count(*) FROM document_compilation_attempts WHERE run_state = 'succeeded'`,
	},
	{
		name: "Fail", from: state{"running", "parsed"},
		call: func(ctx context.Context, r *repo.Repo, db repo.DBTX, _ *fixtureSet, f *fixture) error {
			_, err := r.Fail(ctx, db, &repo.FailParams{Lease: lease0(f), ErrorCode: "BENCH_FAILED", ErrorMessage: "benchmark"})
			return err
		},
		done: `SELECT count(*) FROM document_compilation_attempts WHERE run_state = 'failed'`,
	},
	{
		name: "ScheduleRetry", from: state{"running", "parsed"},
		call: func(ctx context.Context, r *repo.Repo, db repo.DBTX, _ *fixtureSet, f *fixture) error {
			_, err := r.ScheduleRetry(ctx, db, &repo.ScheduleRetryParams{Lease: lease0(f), RetryDelay: time.Hour,
				ErrorCode: "BENCH_RETRY", ErrorMessage: "benchmark"})
			return err
		},
		done: `SELECT count(*) FROM document_compilation_attempts WHERE run_state = 'retry_wait'`,
	},
	{
		name: "Cancel", from: state{"dispatch_pending", "queued"},
		call: func(ctx context.Context, r *repo.Repo, db repo.DBTX, fs *fixtureSet, f *fixture) error {
			_, err := r.Cancel(ctx, db, &repo.CancelParams{AttemptRef: repo.AttemptRef{
				TenantID: benchTenant, KnowledgeSpaceID: fs.SpaceID, AttemptID: f.AttemptID}})
			return err
		},
		done: `SELECT count(*) FROM document_compilation_attempts WHERE run_state = 'canceled'`,
	},
}

// BenchmarkTransition runs each single-attempt transition with 8 clients
// on an 8-connection pool, each operation on its own fixture attempt:
// impl=repo through repo.Repo, impl=raw the same SQL text and arguments
// (captured from a Repo call) sent with pool.Query, the result row read
// but not decoded. Compare with `benchstat -col /impl`.
func BenchmarkTransition(b *testing.B) {
	requireEnv(b)
	for _, tr := range transitions {
		b.Run("op="+tr.name, func(b *testing.B) {
			b.Run("impl=repo", func(b *testing.B) { benchTransition(b, &tr, false) })
			b.Run("impl=raw", func(b *testing.B) { benchTransition(b, &tr, true) })
		})
	}
}

func benchTransition(b *testing.B, tr *transition, raw bool) {
	ctx := context.Background()
	r := repo.New(nil)
	fs := setupFixtures(b, b.N, tr.from)

	var op func(ctx context.Context, i int) error
	if raw {
		sql, args := captureTransition(b, tr, r, fs)
		op = func(ctx context.Context, i int) error {
			rows, err := env.pool.Query(ctx, sql, args[i]...)
			if err != nil {
				return err
			}
			n := 0
			for rows.Next() {
				n++
			}
			if err := rows.Err(); err != nil {
				return err
			}
			if n == 0 {
				return fmt.Errorf("%s: no row (guard refused)", tr.name)
			}
			return nil
		}
	} else {
		op = func(ctx context.Context, i int) error { return tr.call(ctx, r, env.pool, fs, &fs.Items[i]) }
	}
	runParallel(b, op)

	var done int
	if err := env.pool.QueryRow(ctx, tr.done).Scan(&done); err != nil {
		b.Fatal(err)
	}
	if done != b.N {
		b.Fatalf("%s: %d attempts transitioned, want %d", tr.name, done, b.N)
	}
}

// captureTransition captures the transition's statement for fixture 0 and
// returns its SQL and the arguments for every fixture.
func captureTransition(b *testing.B, tr *transition, r *repo.Repo, fs *fixtureSet) (string, [][]any) {
	ctx := context.Background()
	c := fs.Items[0]
	stmts, err := capture(ctx, func(tx pgx.Tx) error {
		if err := tr.call(ctx, r, tx, fs, &c); err != nil {
			return err
		}
		if tr.from.RunState == "" {
			// Start generated its own ids: learn them to substitute them.
			return tx.QueryRow(ctx, `SELECT a.id, o.id FROM document_compilation_attempts a
				JOIN document_compilation_outbox o ON o.attempt_id = a.id`).Scan(&c.AttemptID, &c.OutboxID)
		}
		return nil
	})
	if err != nil {
		b.Fatal(err)
	}
	if len(stmts) == 0 {
		b.Fatalf("%s: nothing captured", tr.name)
	}
	st := stmts[0]
	args := make([][]any, len(fs.Items))
	for i := range fs.Items {
		var n int
		args[i], n = substitute(st.Args, identity(&c, &fs.Items[i]))
		if n == 0 {
			b.Fatalf("%s: no argument identifies the attempt", tr.name)
		}
	}
	return st.SQL, args
}

// setupFixtures creates n fixtures (outside the timer).
func setupFixtures(b *testing.B, n int, st state) *fixtureSet {
	b.StopTimer()
	ctx := context.Background()
	conn, err := env.pool.Acquire(ctx)
	if err != nil {
		b.Fatal(err)
	}
	defer conn.Release()
	fs, err := makeFixtures(ctx, conn.Conn(), n, st)
	if err != nil {
		b.Fatal(err)
	}
	return fs
}

// runParallel runs op for i in 0..b.N-1 from clients goroutines and
// reports tx/s and statements per operation.
func runParallel(b *testing.B, op func(ctx context.Context, i int) error) {
	ctx := context.Background()
	var next atomic.Int64
	par := (clients + gomaxprocs() - 1) / gomaxprocs()
	b.SetParallelism(par)
	stmts0 := env.count.n.Load()
	b.ResetTimer()
	b.StartTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			i := int(next.Add(1) - 1)
			if err := op(ctx, i); err != nil {
				b.Error(err)
				return
			}
		}
	})
	b.StopTimer()
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "tx/s")
	b.ReportMetric(float64(env.count.n.Load()-stmts0)/float64(b.N), "stmts/op")
}
