package faultload

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/knowledgefs/kfsdb/adapters/natsjs"
	"github.com/knowledgefs/kfsdb/memqueue"
	"github.com/knowledgefs/kfsdb/pgsource"
	"github.com/knowledgefs/kfsdb/relay"
	"github.com/knowledgefs/kfsdb/repo"
	"github.com/knowledgefs/kfsdb/tests/natstest"
	"github.com/knowledgefs/kfsdb/tests/testfactory"
	"github.com/knowledgefs/kfsdb/worker"
)

// writeTimeout bounds the runtime's own writes (outcomes, marks).
const writeTimeout = 2 * time.Second

// delivery builds the path's workers (and relay) and returns their Run
// functions.
func (r *Run) delivery(ctx context.Context, t testing.TB) []func(context.Context) error {
	t.Helper()
	c := r.cfg
	var runs []func(context.Context) error
	addWorker := func(i int, src worker.Source) {
		w, err := worker.New(r.pool, src, r.handler(), &worker.Config{
			ID: fmt.Sprintf("faultload-%s-%d", c.Path, i), Concurrency: c.Concurrency, Logger: c.Logger, Metrics: r.metrics,
			Repo: c.Repo, LeaseDuration: c.LeaseDuration, WriteTimeout: writeTimeout,
			RetryBackoffBase: 100 * time.Millisecond, RetryBackoffCap: time.Second, Tracer: tracer{r},
		})
		require.NoError(t, err)
		runs = append(runs, w.Run)
	}
	switch c.Path {
	case DirectListen, DirectPoll:
		for i := range c.Workers {
			src, err := pgsource.New(r.pool, &pgsource.Config{
				PollOnly: c.Path == DirectPoll, PollInterval: 250 * time.Millisecond, WriteTimeout: writeTimeout,
				Logger: c.Logger, Metrics: r.metrics, Repo: c.Repo,
			})
			require.NoError(t, err)
			addWorker(i, src)
		}
	case RelayMemqueue:
		q := memqueue.New()
		runs = append(runs, r.relay(t, q))
		for i := range c.Workers {
			addWorker(i, q)
		}
	case RelayNATS:
		url := c.NATSURL
		if url == "" {
			n, err := natstest.StartNode(t.TempDir())
			require.NoError(t, err)
			t.Cleanup(n.Shutdown)
			url = n.URL
		}
		// Names of their own, so that runs sharing a server keep apart.
		suffix := uuid.NewString()[:8]
		ncfg := &natsjs.Config{Stream: "FAULTLOAD_" + suffix, Consumer: "faultload-" + suffix,
			SubjectPrefix: "faultload." + suffix, LeaseDuration: c.LeaseDuration}
		js := connectNATS(ctx, t, url)
		ectx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		require.NoError(t, natsjs.EnsureStream(ectx, js, ncfg))
		pub, err := natsjs.NewPublisher(js, ncfg)
		require.NoError(t, err)
		runs = append(runs, r.relay(t, pub))
		for i := range c.Workers {
			src, err := natsjs.NewSource(ctx, connectNATS(ctx, t, url), ncfg)
			require.NoError(t, err)
			addWorker(i, src)
		}
	}
	return runs
}

// relay returns the Run of a relay publishing to pub.
func (r *Run) relay(t testing.TB, pub relay.Publisher) func(context.Context) error {
	t.Helper()
	rl, err := relay.New(r.pool, pub, &relay.Config{
		Logger: r.cfg.Logger, Metrics: r.metrics, Repo: r.cfg.Repo, PollInterval: 100 * time.Millisecond, BatchSize: 20,
		LockDuration: 2 * time.Second, PublishTimeout: time.Second, WriteTimeout: writeTimeout,
		VisibilityTimeout: 10 * time.Second, BackoffBase: 100 * time.Millisecond, BackoffCap: time.Second,
	})
	require.NoError(t, err)
	return rl.Run
}

// connectNATS opens a client that keeps reconnecting (an outage must not
// close it), closed at the test's cleanup, once JetStream answers.
func connectNATS(ctx context.Context, t testing.TB, url string) jetstream.JetStream {
	t.Helper()
	nc, err := nats.Connect(url, nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond), nats.RetryOnFailedConnect(true))
	require.NoError(t, err)
	t.Cleanup(nc.Close)
	wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	require.NoError(t, natstest.WaitJetStream(wctx, nc))
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	return js
}

// handler compiles each attempt from its checkpoint to smoke_eval_passed,
// StepDelay before each step, binding the space's candidate, and counts
// the handlers stopped by the loss of their lease.
func (r *Run) handler() worker.Handler {
	cands := map[uuid.UUID]testfactory.Candidate{}
	for _, d := range r.docs {
		cands[d.doc.Scope.KnowledgeSpaceID] = d.doc.Candidate
	}
	return worker.HandlerFunc(func(ctx context.Context, job *worker.Job) error {
		err := testfactory.CompileJob(ctx, job, cands[job.Attempt.KnowledgeSpaceID], func(ctx context.Context) error {
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(r.cfg.StepDelay):
				return nil
			}
		})
		if ctx.Err() != nil && errors.Is(context.Cause(ctx), repo.ErrLeaseLost) {
			r.stopped.Add(1)
		}
		return err
	})
}

// tracer sees every delivery's outcome once it is recorded: a completion
// after its write committed.
type tracer struct{ r *Run }

func (tr tracer) StartProcess(ctx context.Context, _ worker.Message) (context.Context, func(worker.Result)) {
	began := time.Now()
	return ctx, func(res worker.Result) { tr.r.outcome(res, began) }
}

func (r *Run) outcome(res worker.Result, began time.Time) {
	if res.Outcome != worker.OutcomeCompleted {
		return
	}
	r.mu.Lock()
	r.completed[res.AttemptID]++
	r.completions = append(r.completions, span{began, time.Now()})
	r.mu.Unlock()
	r.completedN.Add(1)
}

// runAll runs each function in its own goroutine under a child of ctx and
// returns a stop that cancels them, waits for each (30 s at most) and
// returns the errors other than context.Canceled; it does so once and
// returns nothing after.
func runAll(ctx context.Context, runs []func(context.Context) error) func() []string {
	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan error, len(runs))
	for _, run := range runs {
		go func() { done <- run(runCtx) }()
	}
	var once sync.Once
	return func() []string {
		var errs []string
		once.Do(func() {
			cancel()
			for range runs {
				select {
				case err := <-done:
					if !errors.Is(err, context.Canceled) {
						errs = append(errs, fmt.Sprintf("a worker or relay returned %v", err))
					}
				case <-time.After(30 * time.Second):
					errs = append(errs, "a worker or relay did not stop within 30 s")
				}
			}
		})
		return errs
	}
}
