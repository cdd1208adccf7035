package faultload

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/knowledgefs/kfsdb/observe"
	"github.com/knowledgefs/kfsdb/repo"
	"github.com/knowledgefs/kfsdb/tests/testfactory"
)

// Run is a load running on one delivery path. Start makes it; MarkFault,
// WaitCompleted and the accessors are safe for concurrent use; Finish ends
// it once.
type Run struct {
	cfg     *Config
	pool    *pgxpool.Pool // the app's: workers, relay, producers, probe
	check   *pgxpool.Pool // the run's own reads, so a busy app pool cannot starve them
	metrics *observe.Counts
	started time.Time

	docs     []*docState
	produced chan struct{} // closed when every producer returned
	stopSide context.CancelFunc
	stopRun  func() []string // stops the workers and relay; their unexpected errors
	probe    *probe
	logs     *logCheck

	mu          sync.Mutex
	faults      []*faultMark
	startOKs    []span // each successful Start call
	completions []span // each completion acknowledged to a worker, from the delivery's take
	completed   map[uuid.UUID]int
	errs        errorLog

	completedN atomic.Int64
	stopped    atomic.Int64 // handlers stopped with cause repo.ErrLeaseLost
	finished   atomic.Bool
}

// docState is one document version the run starts an attempt for.
type docState struct {
	doc     testfactory.Document
	params  *repo.StartParams // the same identity on every retry
	inTx    bool
	upfront bool

	// Under Run.mu.
	inFlight bool      // a Start (or the read before a retry) is running
	id       uuid.UUID // the attempt a Start returned; Nil until one succeeded
	errored  bool      // some Start call for it returned an error
	firstErr string
	gaveUp   bool
}

// span is when a call began and when it returned.
type span struct{ began, ended time.Time }

// faultMark is a MarkFault and what was in flight at that instant.
type faultMark struct {
	name     string
	at       time.Time
	starts   []*docState // Starts running
	attempts []uuid.UUID // attempts started and not seen completed
}

// Start seeds the documents, starts the Upfront attempts, and runs the
// path's workers (and relay), the producers and the probe. Setup failures
// fail t (call it from the test's goroutine); everything after is
// counted in the Report. Whatever Start runs is stopped by Finish, or at
// the test's cleanup at the latest.
func Start(ctx context.Context, t testing.TB, cfg *Config) *Run {
	t.Helper()
	c, err := cfg.withDefaults()
	require.NoError(t, err)
	r := &Run{cfg: c, metrics: &observe.Counts{}, completed: map[uuid.UUID]int{}, produced: make(chan struct{})}
	r.logs = newLogCheck(c.Logger.Handler())
	c.Logger = slog.New(r.logs)
	// Every worker slot and its heartbeat, the sources' kept connections,
	// the relay's listener and claims, the producers and the probe.
	r.pool = NewPool(t, c.URL, int32(2*c.Workers*c.Concurrency+2*c.Producers+12))
	r.check = NewPool(t, c.URL, 4)

	setup, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	testfactory.InstallLeaseAudit(setup, t, r.pool)
	_, err = r.pool.Exec(setup, appWritesDDL)
	require.NoError(t, err)
	r.seed(setup, t)
	if c.Probe {
		r.probe = newProbe(setup, t, r)
	}

	runs := r.delivery(ctx, t)
	r.started = time.Now()
	r.stopRun = runAll(ctx, runs)
	t.Cleanup(func() { r.stop() })

	sideCtx, stopSide := context.WithCancel(ctx)
	r.stopSide = stopSide
	r.produce(sideCtx)
	if r.probe != nil {
		r.probe.start(sideCtx)
	}
	return r
}

// MarkFault records that the fault name happens now, with what is in
// flight: the Starts running and the attempts started and not yet seen
// completed. The RTO is measured from the last mark.
func (r *Run) MarkFault(name string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	m := &faultMark{name: name, at: time.Now()}
	for _, d := range r.docs {
		switch {
		case d.inFlight:
			m.starts = append(m.starts, d)
		case d.id != uuid.Nil && r.completed[d.id] == 0:
			m.attempts = append(m.attempts, d.id)
		}
	}
	r.faults = append(r.faults, m)
}

// WaitCompleted waits until workers have completed n attempts (as the
// workers saw them acknowledged). It returns an error when no attempt
// completes for Config.Stall, or when ctx ends.
func (r *Run) WaitCompleted(ctx context.Context, n int) error {
	return waitProgress(ctx, r.cfg.Stall, func(context.Context) (int, bool, bool) {
		done := int(r.completedN.Load())
		return done, done >= n, true
	}, fmt.Sprintf("waiting for %d completed attempts", n))
}

// Pool is the app's pool (workers, relay, producers).
func (r *Run) Pool() *pgxpool.Pool { return r.pool }

// Repo is the Repo every caller of the run uses.
func (r *Run) Repo() *repo.Repo { return r.cfg.Repo }

// Metrics are the relay's and workers' counts.
func (r *Run) Metrics() *observe.Counts { return r.metrics }

// HandlersStopped counts the handlers whose context ended because their
// lease was lost (context.Cause repo.ErrLeaseLost).
func (r *Run) HandlersStopped() int64 { return r.stopped.Load() }

// Completed counts the completions workers saw acknowledged.
func (r *Run) Completed() int64 { return r.completedN.Load() }

// FirstAttempt returns the first attempt started, with its tenant.
func (r *Run) FirstAttempt() (tenant string, id uuid.UUID) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, d := range r.docs {
		if d.id != uuid.Nil {
			return d.doc.Scope.TenantID, d.id
		}
	}
	return "", uuid.Nil
}

// stop stops the producers, the probe, the workers and the relay; it
// returns their unexpected errors the first time and nothing after.
func (r *Run) stop() []string {
	if r.stopSide != nil {
		r.stopSide()
	}
	<-r.produced
	if r.probe != nil {
		r.probe.wait()
	}
	return r.stopRun()
}

// NewPool is a pool on url of at most maxConns connections, closed when t
// ends.
func NewPool(t testing.TB, url string, maxConns int32) *pgxpool.Pool {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(url)
	require.NoError(t, err)
	cfg.MaxConns = maxConns
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	return pool
}
