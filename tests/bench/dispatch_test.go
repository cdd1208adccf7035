package bench

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/knowledgefs/kfsdb/repo"
)

// dispatchBatch is the relay's batch size.
const dispatchBatch = 100

// BenchmarkDispatch is the relay's batch path: ClaimOutbox of up to 100 due
// rows, then MarkDispatched of all of them, by one relay (one client), and
// by two relays at once (…Relays2: SKIP LOCKED keeps them on different
// rows, and one's commit overlaps the other's work), each with synchronous
// and asynchronous (…Async) progress commits. One operation is one row;
// rows/s is the dispatch throughput.
func BenchmarkDispatch(b *testing.B) {
	requireEnv(b)
	for _, v := range []struct {
		op     string
		relays int
		async  bool
	}{
		{"ClaimMark100", 1, false},
		{"ClaimMark100Relays2", 2, false},
		{"ClaimMark100Async", 1, true},
		{"ClaimMark100AsyncRelays2", 2, true},
	} {
		b.Run("op="+v.op+"/impl=repo", func(b *testing.B) { benchDispatch(b, false, v.relays, v.async) })
		b.Run("op="+v.op+"/impl=raw", func(b *testing.B) { benchDispatch(b, true, v.relays, v.async) })
	}
}

// benchDispatch runs relays concurrent relays; async is
// repo.Config.AsyncProgressCommits (claim and mark commit without waiting
// for the WAL flush).
func benchDispatch(b *testing.B, raw bool, relays int, async bool) {
	ctx := context.Background()
	r := repo.New(&repo.Config{AsyncProgressCommits: async})
	setupFixtures(b, b.N, state{"dispatch_pending", "queued"})

	repoBatch := func(k int) (int, error) {
		msgs, err := r.ClaimOutbox(ctx, env.pool, &repo.ClaimOutboxParams{RelayID: benchRelay, BatchSize: int32(k)})
		if err != nil || len(msgs) == 0 {
			return 0, err
		}
		ds := make([]repo.Dispatch, len(msgs))
		for i, m := range msgs {
			ds[i] = repo.Dispatch{OutboxID: m.ID, LockToken: *m.LockToken, QueueJobID: "job-" + m.ID.String()}
		}
		res, err := r.MarkDispatched(ctx, env.pool, &repo.MarkDispatchedParams{Dispatches: ds})
		if err != nil {
			return 0, err
		}
		return len(res.Marked), nil
	}
	batch := repoBatch
	if raw {
		batch = rawDispatch(b, r)
	}

	stmts0 := env.count.n.Load()
	b.ResetTimer()
	b.StartTimer()
	var (
		done int64
		mu   sync.Mutex
		wg   sync.WaitGroup
		errs = make(chan error, relays)
	)
	// take reserves up to a batch of the rows left; give returns what a
	// batch did not dispatch.
	take := func() int {
		mu.Lock()
		defer mu.Unlock()
		k := min(int64(dispatchBatch), int64(b.N)-done)
		done += k
		return int(k)
	}
	give := func(k int) {
		mu.Lock()
		done -= int64(k)
		mu.Unlock()
	}
	for range relays {
		wg.Go(func() {
			for empty := 0; ; {
				k := take()
				if k == 0 {
					return
				}
				n, err := batch(k)
				if err != nil {
					errs <- err
					return
				}
				give(k - n)
				if n > 0 {
					empty = 0
					continue
				}
				// The rows left are claimed by the other relay, or gone.
				if empty++; empty > 1000 {
					errs <- fmt.Errorf("no due row found %d times in a row", empty)
					return
				}
				time.Sleep(time.Millisecond)
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		b.Fatal(err)
	}
	b.StopTimer()
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "rows/s")
	b.ReportMetric(float64(env.count.n.Load()-stmts0)/float64(b.N), "stmts/op")
	var dispatched int
	if err := env.pool.QueryRow(ctx, `SELECT count(*) FROM document_compilation_outbox WHERE status = 'dispatched'`).Scan(&dispatched); err != nil {
		b.Fatal(err)
	}
	if dispatched != b.N {
		b.Fatalf("%d rows dispatched, want %d", dispatched, b.N)
	}
}

// rawDispatch captures ClaimOutbox and MarkDispatched (batch sizes as
// marker values) and returns a batch function replaying their SQL with
// pool.Query, reading only the claimed rows' id and lock_token.
func rawDispatch(b *testing.B, r *repo.Repo) func(k int) (int, error) {
	ctx := context.Background()
	const marker = int32(77)
	var ids, tokens []uuid.UUID
	var jobs, exts []string
	stmts, err := capture(ctx, func(tx pgx.Tx) error {
		msgs, err := r.ClaimOutbox(ctx, tx, &repo.ClaimOutboxParams{RelayID: benchRelay, BatchSize: marker})
		if err != nil {
			return err
		}
		ds := make([]repo.Dispatch, len(msgs))
		for i, m := range msgs {
			ds[i] = repo.Dispatch{OutboxID: m.ID, LockToken: *m.LockToken, QueueJobID: "job-" + m.ID.String()}
			ids, tokens = append(ids, m.ID), append(tokens, *m.LockToken)
			jobs, exts = append(jobs, ds[i].QueueJobID), append(exts, "")
		}
		_, err = r.MarkDispatched(ctx, tx, &repo.MarkDispatchedParams{Dispatches: ds})
		return err
	})
	if err != nil {
		b.Fatal(err)
	}
	if len(stmts) != 2 {
		b.Fatalf("captured %d statements, want 2", len(stmts))
	}
	claim, mark := stmts[0], stmts[1]
	return func(k int) (int, error) {
		args, n := substitute(claim.Args, []swap{{marker, int32(k)}})
		if n != 1 {
			return 0, fmt.Errorf("claim: batch size argument not found")
		}
		rows, err := env.pool.Query(ctx, claim.SQL, args...)
		if err != nil {
			return 0, err
		}
		idCol, tokCol := -1, -1
		for i, f := range rows.FieldDescriptions() {
			switch f.Name {
			case "id":
				idCol = i
			case "lock_token":
				tokCol = i
			}
		}
		var nIDs, nTokens []uuid.UUID
		for rows.Next() {
			raw := rows.RawValues()
			id, err1 := uuidFrom(raw[idCol])
			tok, err2 := uuidFrom(raw[tokCol])
			if err1 != nil || err2 != nil {
				rows.Close()
				return 0, fmt.Errorf("claim: bad uuid: %v %v", err1, err2)
			}
			nIDs, nTokens = append(nIDs, id), append(nTokens, tok)
		}
		if err := rows.Err(); err != nil {
			return 0, err
		}
		if len(nIDs) == 0 {
			return 0, nil
		}
		nJobs, nExts := make([]string, len(nIDs)), make([]string, len(nIDs))
		for i, id := range nIDs {
			nJobs[i] = "job-" + id.String()
		}
		margs, _ := substitute(mark.Args, []swap{{ids, nIDs}, {tokens, nTokens}, {jobs, nJobs}, {exts, nExts}})
		rows, err = env.pool.Query(ctx, mark.SQL, margs...)
		if err != nil {
			return 0, err
		}
		marked := 0
		for rows.Next() {
			marked++
		}
		return marked, rows.Err()
	}
}

// uuidFrom decodes a uuid column in binary (16 bytes) or text format.
func uuidFrom(raw []byte) (uuid.UUID, error) {
	if len(raw) == 16 {
		return uuid.FromBytes(raw)
	}
	return uuid.ParseBytes(raw)
}
