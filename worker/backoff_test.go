package worker_test

import (
	"context"
	"log/slog"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/knowledgefs/kfsdb/memqueue"
	"github.com/knowledgefs/kfsdb/repo"
	"github.com/knowledgefs/kfsdb/worker"
)

// countLeaseFailures counts the "acquire lease failed" records.
type countLeaseFailures struct{ n *atomic.Int64 }

func (h countLeaseFailures) Enabled(context.Context, slog.Level) bool { return true }
func (h countLeaseFailures) Handle(_ context.Context, r slog.Record) error {
	if r.Message == "acquire lease failed" {
		h.n.Add(1)
	}
	return nil
}
func (h countLeaseFailures) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h countLeaseFailures) WithGroup(string) slog.Handler      { return h }

// TestSlotsBackOffWhileTheDatabaseIsDown runs a worker of two slots over a
// queue holding 300 deliveries while its database refuses connections (a
// dead primary's address). Each delivery it cannot lease goes back to the
// queue for a second; the slots must not cycle through the backlog as
// fast as connections are refused meanwhile (thousands of tries in 2 s
// before the fix) but back off: at most one try per slot after 10, 20, 40
// … ms, up to one a second. A slow machine only makes fewer tries, so the
// bound cannot flake.
func TestSlotsBackOffWhileTheDatabaseIsDown(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	if err := l.Close(); err != nil { // nothing listens there now
		t.Fatal(err)
	}
	pool, err := pgxpool.New(context.Background(), "postgres://kfsdb:kfsdb@"+addr+"/kfsdb?connect_timeout=1")
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()

	q := memqueue.New()
	for range 300 {
		q.Inject(repo.Delivery{AttemptID: uuid.New(), QueueJobID: "job-" + uuid.NewString()})
	}
	var failures atomic.Int64
	w, err := worker.New(pool, q, worker.HandlerFunc(func(context.Context, *worker.Job) error { return nil }), &worker.Config{
		ID: "backoff-worker", Concurrency: 2, Logger: slog.New(countLeaseFailures{&failures}), LeaseDuration: 2 * time.Second,
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if err := w.Run(ctx); err != context.DeadlineExceeded {
		t.Fatalf("Run returned %v, want the context's deadline", err)
	}
	// 10+20+…+640 ms then 1 s: 9 tries per slot fit in 2 s; allow twice
	// that.
	if n := failures.Load(); n == 0 || n > 2*2*9 {
		t.Fatalf("%d failed leases in 2 s for 2 slots, want 1..36: the slots do not back off while the database is down", n)
	}
	t.Logf("%d failed leases in 2 s for 2 slots", failures.Load())
}
