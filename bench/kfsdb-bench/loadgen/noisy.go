package loadgen

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/knowledgefs/kfsdb/bench/kfsdb-bench/delivery"
	"github.com/knowledgefs/kfsdb/repo"
	"github.com/knowledgefs/kfsdb/worker"
)

// Defaults of NoisyConfig.
const (
	NoisyFloodAttemptsDefault = 5000
	NoisyQuietTenantsDefault  = 20
	NoisyQuietAttemptsDefault = 20
	NoisyTimeoutDefault       = 5 * time.Minute
)

// NoisyConfig configures RunNoisyTenant.
type NoisyConfig struct {
	// DatabaseURL is a migrated database; the run adds tenants of its own.
	// Required.
	DatabaseURL string
	// Delivery is how attempts reach the worker. Defaults to
	// delivery.Postgres.
	Delivery delivery.Mode
	// NATSURL is Config.NATSURL.
	NATSURL string
	// FloodAttempts is the noisy tenant's backlog. Defaults to 5,000.
	FloodAttempts int
	// QuietTenants and QuietAttempts: that many tenants start that many
	// attempts each, in each phase. Default 20 and 20.
	QuietTenants, QuietAttempts int
	// Producers start the quiet tenants' attempts concurrently. Defaults
	// to 8.
	Producers int
	// Workers is the worker's Concurrency. Defaults to 8.
	Workers int
	// Timeout bounds a stall: a wait for acknowledgements fails when none
	// came for that long (not a bound on the whole run, which a loaded
	// machine may stretch without anything being wrong). Defaults to 5 min.
	Timeout time.Duration
	// Logger receives the runtime's logs. Defaults to discarding.
	Logger *slog.Logger
}

// NoisyResult is what RunNoisyTenant measured. A wait is from just before
// an attempt's Start to its handler being called (leased and handed to a
// slot).
type NoisyResult struct {
	Delivery                                   delivery.Mode
	Workers                                    int
	FloodAttempts, QuietTenants, QuietAttempts int
	// AloneP50 and AloneP99 are the quiet tenants' waits with nothing else
	// queued; FloodP50 and FloodP99 the same tenants' waits started just
	// after the flood.
	AloneP50, AloneP99, FloodP50, FloodP99 time.Duration
	// FloodWaiting is how many flood attempts had not succeeded yet when
	// the last quiet attempt of the flood phase had.
	FloodWaiting int64
	// Ratio is FloodP99 / AloneP99.
	Ratio float64
	// Statements are per-statement latencies over the run, by sqlc query
	// name.
	Statements map[string]StatementStats
}

// RunNoisyTenant is the fairness scenario: phase one starts QuietAttempts
// for each of QuietTenants with nothing else queued; phase two starts one
// tenant's backlog of FloodAttempts first (StartMany, 100 per statement),
// then the quiet tenants' attempts again, and waits for everything to
// succeed. A fair delivery keeps the quiet tenants' waits near what they
// are alone; a FIFO one makes them wait for the flood.
func RunNoisyTenant(ctx context.Context, cfg *NoisyConfig) (*NoisyResult, error) {
	if cfg == nil || cfg.DatabaseURL == "" {
		return nil, errors.New("loadgen: DatabaseURL is required")
	}
	mode, err := delivery.Check(cfg.Delivery, cfg.NATSURL, 0)
	if err != nil {
		return nil, fmt.Errorf("loadgen: %w", err)
	}
	c := *cfg
	c.Delivery = mode
	c.FloodAttempts = cmp.Or(c.FloodAttempts, NoisyFloodAttemptsDefault)
	c.QuietTenants = cmp.Or(c.QuietTenants, NoisyQuietTenantsDefault)
	c.QuietAttempts = cmp.Or(c.QuietAttempts, NoisyQuietAttemptsDefault)
	c.Producers = cmp.Or(c.Producers, ProducersDefault)
	c.Workers = cmp.Or(c.Workers, WorkersDefault)
	c.Timeout = cmp.Or(c.Timeout, NoisyTimeoutDefault)
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.FloodAttempts < 0 || c.QuietTenants < 0 || c.QuietAttempts < 0 || c.Producers < 0 || c.Workers < 0 || c.Timeout < 0 {
		return nil, errors.New("loadgen: NoisyConfig counts and Timeout must not be negative")
	}
	n := &noisy{c: &c, r: repo.New(nil), spaces: map[uuid.UUID]*spaceSpec{}, starts: map[uuid.UUID]time.Time{}, leased: map[uuid.UUID]time.Time{}}
	return n.run(ctx)
}

type noisy struct {
	c      *NoisyConfig
	r      *repo.Repo
	tr     *tracer
	pool   *pgxpool.Pool
	flood  *scenario
	quiet  []*scenario
	spaces map[uuid.UUID]*spaceSpec

	mu     sync.Mutex
	starts map[uuid.UUID]time.Time // quiet attempts only
	leased map[uuid.UUID]time.Time
	// acked counts acknowledged deliveries per tenant kind.
	floodDone, quietDone atomic.Int64
	handled              sync.Map
	// quietTenant maps each handled attempt to whether it is a quiet
	// tenant's (the handler knows the tenant; the acknowledgement only the
	// id).
	quietTenant sync.Map
	floodTenant string
}

func (n *noisy) run(ctx context.Context) (*NoisyResult, error) {
	pcfg, err := pgxpool.ParseConfig(n.c.DatabaseURL)
	if err != nil {
		return nil, fmt.Errorf("loadgen: %w", err)
	}
	pcfg.MaxConns = int32(n.c.Producers + n.c.Workers + 4)
	n.tr = &tracer{lat: map[string][]time.Duration{}}
	pcfg.ConnConfig.Tracer = n.tr
	if n.pool, err = pgxpool.NewWithConfig(ctx, pcfg); err != nil {
		return nil, fmt.Errorf("loadgen: connect: %w", err)
	}
	defer n.pool.Close()
	if err := n.setup(ctx); err != nil {
		return nil, err
	}
	lc := &Config{Delivery: n.c.Delivery, NATSURL: n.c.NATSURL, Logger: n.c.Logger, Workers: n.c.Workers}
	rt, err := startRuntime(ctx, n.pool, lc, n.r, nil, n.handler(), n.onAck)
	if err != nil {
		return nil, err
	}
	defer rt.stop()

	res := &NoisyResult{Delivery: n.c.Delivery, Workers: n.c.Workers, FloodAttempts: n.c.FloodAttempts,
		QuietTenants: n.c.QuietTenants, QuietAttempts: n.c.QuietAttempts}
	quietPhase := int64(n.c.QuietTenants * n.c.QuietAttempts)
	alone, err := n.startQuiet(ctx, 0)
	if err != nil {
		return nil, err
	}
	if err := n.await(ctx, func() bool { return n.quietDone.Load() >= quietPhase }); err != nil {
		return nil, fmt.Errorf("loadgen: quiet tenants alone: %w", err)
	}
	if err := n.startFlood(ctx); err != nil {
		return nil, err
	}
	crowded, err := n.startQuiet(ctx, n.c.QuietAttempts)
	if err != nil {
		return nil, err
	}
	if err := n.await(ctx, func() bool { return n.quietDone.Load() >= 2*quietPhase }); err != nil {
		return nil, fmt.Errorf("loadgen: quiet tenants beside the flood: %w", err)
	}
	res.FloodWaiting = int64(n.c.FloodAttempts) - n.floodDone.Load()
	if err := n.await(ctx, func() bool { return n.floodDone.Load() >= int64(n.c.FloodAttempts) }); err != nil {
		return nil, fmt.Errorf("loadgen: flood: %w", err)
	}
	rt.stop()

	var succeeded int64
	if err := n.pool.QueryRow(ctx, `SELECT count(*) FROM document_compilation_attempts WHERE run_state = 'succeeded'`).Scan(&succeeded); err != nil {
		return nil, fmt.Errorf("loadgen: count: %w", err)
	}
	if want := 2*quietPhase + int64(n.c.FloodAttempts); succeeded != want {
		return nil, fmt.Errorf("loadgen: %d attempts succeeded, want %d", succeeded, want)
	}
	aloneWaits, crowdedWaits := n.waits(alone), n.waits(crowded)
	res.AloneP50, res.AloneP99 = percentile(aloneWaits, 0.50), percentile(aloneWaits, 0.99)
	res.FloodP50, res.FloodP99 = percentile(crowdedWaits, 0.50), percentile(crowdedWaits, 0.99)
	if res.AloneP99 > 0 {
		res.Ratio = float64(res.FloodP99) / float64(res.AloneP99)
	}
	res.Statements = statementStats(n.tr)
	return res, nil
}

func (n *noisy) setup(ctx context.Context) error {
	suffix := uuid.NewString()[:8]
	var err error
	n.floodTenant = "noisy-flood-" + suffix
	if n.flood, err = setupTenant(ctx, n.pool, n.floodTenant, n.c.FloodAttempts, 1); err != nil {
		return err
	}
	for i := range n.c.QuietTenants {
		sc, err := setupTenant(ctx, n.pool, fmt.Sprintf("noisy-quiet-%02d-%s", i, suffix), 2*n.c.QuietAttempts, 1)
		if err != nil {
			return err
		}
		n.quiet = append(n.quiet, sc)
	}
	for _, sc := range append([]*scenario{n.flood}, n.quiet...) {
		for id, sp := range sc.byID {
			n.spaces[id] = sp
		}
	}
	return settle(ctx, n.pool)
}

// handler notes when each attempt reached a slot and completes it in the
// one write after the lease.
func (n *noisy) handler() worker.HandlerFunc {
	complete := noopHandler(n.spaces, &n.handled, false)
	return func(ctx context.Context, job *worker.Job) error {
		now := time.Now()
		n.mu.Lock()
		if _, dup := n.leased[job.Attempt.ID]; !dup {
			n.leased[job.Attempt.ID] = now
		}
		n.mu.Unlock()
		n.quietTenant.Store(job.Attempt.ID, job.Attempt.TenantID != n.floodTenant)
		return complete(ctx, job)
	}
}

func (n *noisy) onAck(id uuid.UUID) {
	v, ok := n.handled.LoadAndDelete(id)
	if !ok || v == nil {
		return
	}
	v, _ = n.quietTenant.Load(id)
	if quiet, _ := v.(bool); quiet {
		n.quietDone.Add(1)
	} else {
		n.floodDone.Add(1)
	}
}

// startQuiet starts assets [from, from+QuietAttempts) of every quiet
// tenant, tenants interleaved, from Producers goroutines; it returns the
// attempts' ids.
func (n *noisy) startQuiet(ctx context.Context, from int) ([]uuid.UUID, error) {
	type item struct {
		sc *scenario
		i  int
	}
	var items []item
	for i := from; i < from+n.c.QuietAttempts; i++ {
		for _, sc := range n.quiet {
			items = append(items, item{sc, i})
		}
	}
	ids := make([]uuid.UUID, len(items))
	var next atomic.Int64
	var wg sync.WaitGroup
	var firstErr atomic.Pointer[error]
	for range n.c.Producers {
		wg.Go(func() {
			for k := int(next.Add(1) - 1); k < len(items) && firstErr.Load() == nil; k = int(next.Add(1) - 1) {
				it := items[k]
				t0 := time.Now()
				res, err := n.r.Start(ctx, n.pool, &repo.StartParams{TenantID: it.sc.tenant, KnowledgeSpaceID: it.sc.spaceOf(it.i),
					DocumentAssetID: it.sc.assets[it.i], DocumentVersion: 1, PublicationGenerationID: it.sc.generation})
				if err != nil {
					firstErr.Store(&err)
					return
				}
				// The handler may run before this: starts is read at its
				// acknowledgement, which follows the handler's completion.
				n.mu.Lock()
				n.starts[res.Attempt.ID] = t0
				n.mu.Unlock()
				ids[k] = res.Attempt.ID
			}
		})
	}
	wg.Wait()
	if p := firstErr.Load(); p != nil {
		return nil, fmt.Errorf("loadgen: start quiet attempt: %w", *p)
	}
	return ids, nil
}

// startFlood starts the noisy tenant's whole backlog, 100 per statement,
// in one transaction: the backlog appears at once, as after an outage or
// a bulk import, instead of trickling in as fast as the worker drains it.
func (n *noisy) startFlood(ctx context.Context) error {
	sc := n.flood
	tx, err := n.pool.Begin(ctx)
	if err != nil {
		return fmt.Errorf("loadgen: start flood: %w", err)
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	for i := 0; i < len(sc.assets); i += repo.MaxBatchSize {
		var ps []*repo.StartParams
		for j := i; j < min(i+repo.MaxBatchSize, len(sc.assets)); j++ {
			ps = append(ps, &repo.StartParams{TenantID: sc.tenant, KnowledgeSpaceID: sc.spaceOf(j),
				DocumentAssetID: sc.assets[j], DocumentVersion: 1, PublicationGenerationID: sc.generation})
		}
		res, err := n.r.StartMany(ctx, tx, &repo.StartManyParams{Starts: ps})
		if err != nil {
			return fmt.Errorf("loadgen: start flood: %w", err)
		}
		for _, s := range res {
			if s.Err != nil {
				return fmt.Errorf("loadgen: start flood: %w", s.Err)
			}
		}
	}
	if err := tx.Commit(ctx); err != nil {
		return fmt.Errorf("loadgen: start flood: %w", err)
	}
	return nil
}

func (n *noisy) await(ctx context.Context, done func() bool) error {
	progress := func() int64 { return n.floodDone.Load() + n.quietDone.Load() }
	last, lastMoved := progress(), time.Now()
	for !done() {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(5 * time.Millisecond):
		}
		if p := progress(); p != last {
			last, lastMoved = p, time.Now()
		} else if time.Since(lastMoved) > n.c.Timeout {
			return fmt.Errorf("stalled: no attempt acknowledged for %s (%d flood, %d quiet done)", n.c.Timeout, n.floodDone.Load(), n.quietDone.Load())
		}
	}
	return nil
}

func (n *noisy) waits(ids []uuid.UUID) []time.Duration {
	n.mu.Lock()
	defer n.mu.Unlock()
	out := make([]time.Duration, 0, len(ids))
	for _, id := range ids {
		t0, ok0 := n.starts[id]
		t1, ok1 := n.leased[id]
		if ok0 && ok1 {
			out = append(out, max(t1.Sub(t0), 0))
		}
	}
	return out
}

// WriteTable writes the result as Markdown; its last line is the summary
// `noisy-tenant: quiet tenants' p99 wait <d> (alone <d>) = <r>x`.
func (r *NoisyResult) WriteTable(w io.Writer) {
	fmt.Fprintf(w, "| metric | value |\n|---|---:|\n")
	fmt.Fprintf(w, "| delivery | %s |\n", deliveryText(r.Delivery))
	fmt.Fprintf(w, "| worker slots | %d |\n", r.Workers)
	fmt.Fprintf(w, "| flood: one tenant's backlog, started first | %d attempts |\n", r.FloodAttempts)
	fmt.Fprintf(w, "| quiet: tenants × attempts, in each phase | %d × %d |\n", r.QuietTenants, r.QuietAttempts)
	fmt.Fprintf(w, "| quiet wait (start → handler) alone p50 / p99 | %s / %s |\n", r.AloneP50.Round(time.Millisecond), r.AloneP99.Round(time.Millisecond))
	fmt.Fprintf(w, "| quiet wait beside the flood p50 / p99 | %s / %s |\n", r.FloodP50.Round(time.Millisecond), r.FloodP99.Round(time.Millisecond))
	fmt.Fprintf(w, "| flood attempts still waiting when the last quiet one succeeded | %d of %d |\n", r.FloodWaiting, r.FloodAttempts)
	writeStatements(w, r.Statements)
	fmt.Fprintf(w, "\nnoisy-tenant: quiet tenants' p99 wait %s (alone %s) = %.1fx\n", r.FloodP99.Round(time.Millisecond), r.AloneP99.Round(time.Millisecond), r.Ratio)
}
