package loadgen

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/knowledgefs/kfsdb/repo"
)

// load is one run: the producers, the relay and worker they feed, and when
// each attempt was started and acknowledged.
type load struct {
	c    *Config
	pool *pgxpool.Pool
	sc   *scenario
	tr   *tracer
	repo *repo.Repo
	// in are the metrics and tracing of an observed run (Config.Observe);
	// nil otherwise.
	in *instruments

	mu     sync.Mutex
	starts map[uuid.UUID]time.Time
	acks   map[uuid.UUID]time.Time
	// called is when the handler was called, for the acknowledged ones.
	called  map[uuid.UUID]time.Time
	started atomic.Int64
	acked   atomic.Int64
	// handled holds the attempts whose handler returned nil: the worker
	// also acknowledges stale deliveries (a redispatched copy whose first
	// delivery sat in the queue past its deadline), which must not count
	// as succeeded.
	handled sync.Map

	rt *runtime
	// warmed counts the warm-up's attempts (succeeded, not reported).
	warmed int64
}

// measured is what drive saw in the window.
type measured struct {
	end        time.Time
	statements int64
	drained    bool
	// cpu is the server's CPU time over the run, -1 if unknown.
	cpu time.Duration
	// spans are an observed run's exported spans by name.
	spans map[string]int64
}

func newLoad(c *Config, pool *pgxpool.Pool, sc *scenario, tr *tracer, in *instruments) *load {
	return &load{c: c, pool: pool, sc: sc, tr: tr, in: in,
		repo:   repo.New(&repo.Config{AsyncProgressCommits: c.AsyncProgressCommits}),
		starts: make(map[uuid.UUID]time.Time, 1<<14), acks: make(map[uuid.UUID]time.Time, 1<<14),
		called: make(map[uuid.UUID]time.Time, 1<<14)}
}

// drive runs the producers for Duration and waits up to DrainTimeout for
// every started attempt to be acknowledged.
func (l *load) drive(ctx context.Context) (*measured, error) {
	stmts0 := l.tr.count.Load()
	begin := time.Now()
	m := &measured{end: begin.Add(l.c.Duration)}
	if err := l.produce(ctx, begin, m.end); err != nil {
		return nil, err
	}
	for deadline := time.Now().Add(l.c.DrainTimeout); time.Now().Before(deadline) && ctx.Err() == nil; {
		if l.acked.Load() >= l.started.Load() {
			m.drained = true
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	m.statements = l.tr.count.Load() - stmts0
	return m, nil
}

func (l *load) startRuntime(ctx context.Context) error {
	rt, err := startRuntime(ctx, l.pool, l.c, l.repo, l.in, noopHandler(l.sc.byID, &l.handled, l.c.StepCheckpoints), l.onAck)
	if err != nil {
		return err
	}
	l.rt = rt
	return nil
}

// stop ends the relay and worker and waits for them.
func (l *load) stop() {
	if l.rt != nil {
		l.rt.stop()
	}
}

// warmUp runs two attempts per producer through the runtime before the
// window, from the last assets, and then forgets them: every connection
// has prepared its statements and the worker has fetched, as in a
// service that has been running. Without it the window's first few
// hundred milliseconds (preparing and planning on every connection at
// once, on two cores) dominate a paced run's p99. bench/river warms up
// the same way.
func (l *load) warmUp(ctx context.Context) error {
	n := min(2*l.c.Producers, len(l.sc.assets)/10)
	first := len(l.sc.assets) - n
	var wg sync.WaitGroup
	errs := make([]error, n)
	for k := range n {
		wg.Go(func() { errs[k] = l.start(ctx, first+k) })
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("loadgen: warm-up: %w", err)
	}
	for deadline := time.Now().Add(l.c.DrainTimeout); l.acked.Load() < int64(n); {
		if time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("loadgen: warm-up: %d of %d attempts done", l.acked.Load(), n)
		}
		time.Sleep(5 * time.Millisecond)
	}
	l.mu.Lock()
	clear(l.starts)
	clear(l.acks)
	clear(l.called)
	l.mu.Unlock()
	l.started.Store(0)
	l.acked.Store(0)
	l.warmed = int64(n)
	l.sc.assets = l.sc.assets[:first]
	return nil
}

func (l *load) onAck(id uuid.UUID) {
	v, ok := l.handled.Load(id)
	if !ok {
		return
	}
	now := time.Now()
	l.mu.Lock()
	if _, dup := l.acks[id]; !dup {
		l.acks[id] = now
		if t, ok := v.(time.Time); ok {
			l.called[id] = t
		}
		l.acked.Add(1)
	}
	l.mu.Unlock()
}

// produce runs the producers until end (or the assets run out), each
// starting one attempt per transaction, paced to Rate when it is set.
func (l *load) produce(ctx context.Context, begin, end time.Time) error {
	var next atomic.Int64
	var wg sync.WaitGroup
	var prodErr atomic.Pointer[error]
	for range l.c.Producers {
		wg.Go(func() {
			for time.Now().Before(end) && ctx.Err() == nil {
				i := int(next.Add(1) - 1)
				if i >= len(l.sc.assets) {
					return
				}
				if l.c.Rate > 0 {
					time.Sleep(time.Until(begin.Add(time.Duration(float64(i) / l.c.Rate * float64(time.Second)))))
					if !time.Now().Before(end) {
						return
					}
				}
				if err := l.start(ctx, i); err != nil {
					prodErr.Store(&err)
					return
				}
			}
		})
	}
	wg.Wait()
	if p := prodErr.Load(); p != nil {
		return fmt.Errorf("loadgen: start: %w", *p)
	}
	return nil
}

func (l *load) start(ctx context.Context, i int) error {
	t0 := time.Now()
	p := &repo.StartParams{TenantID: l.sc.tenant, KnowledgeSpaceID: l.sc.spaceOf(i),
		DocumentAssetID: l.sc.assets[i], DocumentVersion: 1, PublicationGenerationID: l.sc.generation}
	var res *repo.StartResult
	err := l.in.startInSpan(ctx, p, func(ctx context.Context) (err error) {
		res, err = l.repo.Start(ctx, l.pool, p)
		return err
	})
	if err != nil {
		return err
	}
	l.mu.Lock()
	l.starts[res.Attempt.ID] = t0
	l.mu.Unlock()
	l.started.Add(1)
	return nil
}
