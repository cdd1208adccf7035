package kfsdbtest

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/knowledgefs/kfsdb/kfstype"
	"github.com/knowledgefs/kfsdb/repo"
	"github.com/knowledgefs/kfsdb/worker"
)

// ErrNothingDue: [WorkNext] found no attempt due to run.
var ErrNothingDue = errors.New("kfsdbtest: no attempt is due")

// WorkerID is the worker id [WorkNext] leases under when cfg.ID is empty.
const WorkerID = "kfsdbtest"

// WorkNext runs the next due attempt through handler h, synchronously, as
// a worker on direct delivery would: it leases the attempt the way
// pgsource does (repo.FetchLeases, one lease: the oldest due attempt of
// the first tenant in tenant_id order that has one), then hands the lease
// to the worker's own Worker.Process, which runs h with the lease
// heartbeated and records the outcome exactly as a running worker does
// (Complete; ScheduleRetry for worker.Retryable, transient errors and,
// with cfg.RetryPlainErrors, plain errors; Fail otherwise; a panic fails
// the attempt). cfg configures that worker (nil for the defaults; its ID
// defaults to [WorkerID], its Logger to slog.Default()).
//
// It returns [ErrNothingDue] when no attempt is due (a retry is due only
// at its retry_at: pass cfg.Repo with a clock, or RetryBackoffBase and
// RetryBackoffCap of a millisecond, to run it again). An attempt with no
// execution attempts left is failed by the fetch itself
// (EXECUTION_ATTEMPTS_EXHAUSTED): the Result says OutcomeExhausted.
func WorkNext(ctx context.Context, pool *pgxpool.Pool, h worker.Handler, cfg *worker.Config) (worker.Result, error) {
	c := worker.Config{}
	if cfg != nil {
		c = *cfg
	}
	c.ID = cmp.Or(c.ID, WorkerID)
	c.LeaseDuration = cmp.Or(c.LeaseDuration, repo.LeaseDurationDefault)
	if c.Repo == nil {
		c.Repo = repo.New(nil)
	}
	w, err := worker.New(pool, idleSource{}, h, &c)
	if err != nil {
		return worker.Result{}, fmt.Errorf("kfsdbtest: %w", err)
	}
	res, err := c.Repo.FetchLeases(ctx, pool, &repo.FetchLeasesParams{WorkerID: c.ID, BatchSize: 1, LeaseDuration: c.LeaseDuration})
	switch {
	case err != nil:
		return worker.Result{}, fmt.Errorf("kfsdbtest: lease the next due attempt: %w", err)
	case len(res.Leased) == 1:
		return w.Process(ctx, leasedMessage{attempt: res.Leased[0].Attempt, lease: res.Leased[0].Lease}), nil
	case len(res.Exhausted) > 0:
		a := res.Exhausted[0]
		return worker.Result{AttemptID: a.ID, TenantID: a.TenantID, Outcome: worker.OutcomeExhausted}, nil
	}
	return worker.Result{}, ErrNothingDue
}

// Work is [WorkNext] on the test's database, with the worker's logs in the
// test's log (unless cfg.Logger is set). It fails the test when nothing is
// due.
func (db *DB) Work(t testing.TB, h worker.Handler, cfg *worker.Config) worker.Result {
	t.Helper()
	c := worker.Config{}
	if cfg != nil {
		c = *cfg
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	res, err := WorkNext(context.Background(), db.Pool, h, &c)
	must(t, err)
	return res
}

// leasedMessage is a lease taken by WorkNext: a worker.LeasedMessage, so
// Worker.Process runs it without AcquireLease. Like pgsource's, its Ack and
// Retry do nothing: the outcome's write is the acknowledgement, and an
// attempt whose outcome was not recorded is due again at the lease's
// expiry.
type leasedMessage struct {
	attempt *kfstype.Attempt
	lease   *repo.Lease
}

func (m leasedMessage) Delivery() repo.Delivery {
	d := repo.Delivery{AttemptID: m.attempt.ID}
	if m.attempt.QueueJobID != nil {
		d.QueueJobID = *m.attempt.QueueJobID
	}
	return d
}

func (m leasedMessage) Leased() (*kfstype.Attempt, *repo.Lease) { return m.attempt, m.lease }
func (leasedMessage) Ack(context.Context) error                 { return nil }
func (leasedMessage) Retry(context.Context, time.Time) error    { return nil }

// idleSource is the source of WorkNext's worker, which never runs its
// loop: Process gets its message directly.
type idleSource struct{}

func (idleSource) Receive(ctx context.Context) (worker.Message, error) {
	<-ctx.Done()
	return nil, ctx.Err()
}

// testWriter writes each log line to the test's log.
type testWriter struct{ t testing.TB }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Helper()
	w.t.Log(strings.TrimSuffix(string(p), "\n"))
	return len(p), nil
}
