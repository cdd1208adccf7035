package worker

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/knowledgefs/kfsdb/kfstype"
	"github.com/knowledgefs/kfsdb/repo"
)

// The stop's phases without a database: a source hands the slots leased
// messages and every write is refused (nothing listens at the pool's
// address), so nothing is recorded, but the phases, the counts and the
// abandonment are the worker's own. tests/runtime checks the same against
// PostgreSQL, with the outcomes recorded.

// leasedMsg is a LeasedMessage under a lease an hour long.
type leasedMsg struct {
	a *kfstype.Attempt
	l *repo.Lease
}

func newLeasedMsg(workerID string) *leasedMsg {
	id := uuid.New()
	return &leasedMsg{
		a: &kfstype.Attempt{ID: id, TenantID: "acme", ExecutionAttempts: 1, MaxExecutionAttempts: 5},
		l: &repo.Lease{AttemptID: id, WorkerID: workerID, Token: uuid.New(), ExpiresAt: time.Now().Add(time.Hour)},
	}
}

func (m *leasedMsg) Delivery() repo.Delivery {
	return repo.Delivery{AttemptID: m.a.ID, QueueJobID: "job"}
}
func (m *leasedMsg) Ack(context.Context) error               { return nil }
func (m *leasedMsg) Retry(context.Context, time.Time) error  { return nil }
func (m *leasedMsg) Leased() (*kfstype.Attempt, *repo.Lease) { return m.a, m.l }

// chanSource serves the messages put on its channel.
type chanSource chan Message

func (s chanSource) Receive(ctx context.Context) (Message, error) {
	select {
	case m := <-s:
		return m, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// unreachablePool is a pool whose every connection is refused.
func unreachablePool(t *testing.T) *pgxpool.Pool {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	pool, err := pgxpool.New(context.Background(), "postgres://kfsdb@"+addr+"/kfsdb?connect_timeout=5")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return pool
}

// TestStopPhases: a handler that returns in the drain is Finished, one
// that returns its context's error once canceled is Canceled (the cause
// ErrStopTimeout), and one that ignores it is Abandoned when
// StopAndCancel's context ends; its hand-back is refused here, so it is
// counted as not handed back. Nothing waits on a clock: the drain and
// the grace are an hour long, and each phase ends on the test's word.
// Mutations: no drain (the first handler is counted Canceled); the
// handlers' contexts canceled without a cause; no abandonment (Stop
// never returns).
func TestStopPhases(t *testing.T) {
	src := make(chanSource, 3)
	release, ignore := make(chan struct{}), make(chan struct{})
	defer close(ignore)
	started := make(chan int, 3)
	causes := make(chan error, 1)
	msgs := []*leasedMsg{}
	kinds := map[uuid.UUID]int{}
	h := HandlerFunc(func(ctx context.Context, job *Job) error {
		k := kinds[job.Attempt.ID]
		started <- k
		switch k {
		case 0:
			<-release
			return nil
		case 1:
			<-ctx.Done()
			causes <- context.Cause(ctx)
			return ctx.Err()
		}
		<-ignore
		return nil
	})
	w, err := New(unreachablePool(t), src, h, &Config{Concurrency: 3, StopTimeout: time.Hour, CancelGrace: time.Hour,
		LeaseDuration: time.Hour, WriteTimeout: 5 * time.Second, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	w.TestSignals().Processed.Init()
	w.TestSignals().Stopping.Init()
	for k := range 3 {
		m := newLeasedMsg(w.ID())
		kinds[m.a.ID] = k
		msgs = append(msgs, m)
		src <- m
	}
	runDone := make(chan error, 1)
	go func() { runDone <- w.Run(context.Background()) }()
	for range 3 {
		<-started
	}

	stopCtx, endDrain := context.WithCancel(context.Background())
	stopped := make(chan StopReport, 1)
	go func() {
		rep, err := w.Stop(stopCtx)
		if err != nil {
			t.Error(err)
		}
		stopped <- rep
	}()
	w.TestSignals().Stopping.WaitOrTimeout(t, time.Minute)
	close(release)
	if res := w.TestSignals().Processed.WaitOrTimeout(t, time.Minute); res.AttemptID != msgs[0].a.ID {
		t.Fatalf("first result %+v, want attempt 0's", res)
	}
	endDrain()
	if res := w.TestSignals().Processed.WaitOrTimeout(t, time.Minute); res.AttemptID != msgs[1].a.ID {
		t.Fatalf("second result %+v, want attempt 1's", res)
	}
	if cause := <-causes; !errors.Is(cause, ErrStopTimeout) {
		t.Fatalf("cause %v, want ErrStopTimeout", cause)
	}
	abandonCtx, abandon := context.WithCancel(context.Background())
	abandon()
	rep, err := w.StopAndCancel(abandonCtx)
	if err != nil {
		t.Fatal(err)
	}
	res := w.TestSignals().Processed.WaitOrTimeout(t, time.Minute)
	if res.AttemptID != msgs[2].a.ID || res.Outcome != OutcomeDeferred {
		t.Fatalf("third result %+v, want attempt 2's, its hand-back refused", res)
	}
	for _, r := range []StopReport{rep, <-stopped, w.LastStopReport()} {
		if !errors.Is(r.Cause, ErrStopTimeout) {
			t.Fatalf("report cause %v, want ErrStopTimeout", r.Cause)
		}
		r.Cause = nil
		if want := (StopReport{Finished: 1, Canceled: 1, Abandoned: 1, AbandonedNotHandedBack: 1}); r != want {
			t.Fatalf("report %+v, want %+v", r, want)
		}
	}
	if err := <-runDone; err != nil {
		t.Fatalf("Run: %v, want nil after Stop", err)
	}
}

// TestStopRefusals: Stop and StopAndCancel on a worker with no Run, on a
// nil Worker and with a nil context; New refuses negative stop durations.
func TestStopRefusals(t *testing.T) {
	pool := unreachablePool(t)
	w, err := New(pool, make(chanSource), HandlerFunc(func(context.Context, *Job) error { return nil }), nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.Stop(context.Background()); !errors.Is(err, ErrNotRunning) {
		t.Fatalf("Stop: %v, want ErrNotRunning", err)
	}
	if _, err := w.StopAndCancel(context.Background()); !errors.Is(err, ErrNotRunning) {
		t.Fatalf("StopAndCancel: %v, want ErrNotRunning", err)
	}
	var nilCtx context.Context
	if _, err := w.Stop(nilCtx); !errors.Is(err, repo.ErrInvalidInput) {
		t.Fatalf("Stop(nil): %v, want repo.ErrInvalidInput", err)
	}
	var nilWorker *Worker
	if _, err := nilWorker.StopAndCancel(context.Background()); !errors.Is(err, repo.ErrInvalidInput) {
		t.Fatalf("nil Worker: %v, want repo.ErrInvalidInput", err)
	}
	for _, cfg := range []*Config{{StopTimeout: -1}, {CancelGrace: -1}} {
		if _, err := New(pool, make(chanSource), HandlerFunc(func(context.Context, *Job) error { return nil }), cfg); !errors.Is(err, repo.ErrInvalidInput) {
			t.Fatalf("New(%+v): %v, want repo.ErrInvalidInput", cfg, err)
		}
	}
}

// TestEventsNeverBlock: Config.Events with nobody reading drops each
// event and counts it; an outcome the worker did not record (here, a
// refused write) sends none.
func TestEventsNeverBlock(t *testing.T) {
	w, err := New(unreachablePool(t), make(chanSource), HandlerFunc(func(context.Context, *Job) error { return nil }),
		&Config{Events: make(chan Event), Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	w.finish(Result{AttemptID: uuid.New(), Outcome: OutcomeCompleted})
	w.finish(Result{AttemptID: uuid.New(), Outcome: OutcomeRetried, ErrorCode: kfstype.ErrorCodeCompilationRetryable})
	w.finish(Result{AttemptID: uuid.New(), Outcome: OutcomeDeferred})
	w.finish(Result{AttemptID: uuid.New(), Outcome: OutcomeRetried}) // its write failed: no code
	if got := w.EventsDropped(); got != 2 {
		t.Fatalf("EventsDropped %d, want 2", got)
	}
}

// gatedSource returns one message, once gate opens, whatever the context
// (as pgsource does with a lease it handed a slot as the slot gave up),
// then waits for the context.
type gatedSource struct {
	called chan struct{}
	gate   chan struct{}
	msg    Message
	served bool
}

func (s *gatedSource) Receive(ctx context.Context) (Message, error) {
	if s.served {
		<-ctx.Done()
		return nil, ctx.Err()
	}
	s.served = true
	close(s.called)
	<-s.gate
	return s.msg, nil
}

// TestStopHandsBackWhatArrivesAsItBegins: a delivery a slot receives
// once the stop has begun is handed back without running its handler,
// and counted Unstarted. Mutation: handle not checking the stop after
// the lease (the handler runs).
func TestStopHandsBackWhatArrivesAsItBegins(t *testing.T) {
	src := &gatedSource{called: make(chan struct{}), gate: make(chan struct{})}
	h := HandlerFunc(func(context.Context, *Job) error {
		t.Error("the handler ran after the stop began")
		return nil
	})
	w, err := New(unreachablePool(t), src, h, &Config{Concurrency: 1, LeaseDuration: time.Hour,
		WriteTimeout: 5 * time.Second, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	src.msg = newLeasedMsg(w.ID())
	w.TestSignals().Stopping.Init()
	runDone := make(chan error, 1)
	go func() { runDone <- w.Run(context.Background()) }()
	<-src.called
	stopped := make(chan StopReport, 1)
	go func() {
		rep, err := w.Stop(context.Background())
		if err != nil {
			t.Error(err)
		}
		stopped <- rep
	}()
	w.TestSignals().Stopping.WaitOrTimeout(t, time.Minute)
	close(src.gate)
	if rep := <-stopped; rep != (StopReport{Unstarted: 1}) {
		t.Fatalf("report %+v, want one unstarted delivery", rep)
	}
	if err := <-runDone; err != nil {
		t.Fatal(err)
	}
}
