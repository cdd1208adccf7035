// Package loadgen is kfsdb's lifecycle load driver: P producers call
// repo.Start as fast as they can, the relay publishes through the
// in-process memqueue, and a worker with W handler slots runs a no-op
// compilation, for a fixed duration. By default the handler is the minimal
// lifecycle (Start → dispatch → lease → Complete): it asks the worker to
// complete through every checkpoint in one write (worker.Job.CompleteThrough).
// With StepCheckpoints it persists every checkpoint on the way (five
// Advance writes, binding a candidate at projection_built) before Complete.
// It reports lifecycle throughput (attempts/s from Start to succeeded),
// p50/p99 of start → succeeded and of every statement, round trips per
// attempt, WAL bytes per attempt and dead tuples after the run.
//
// `kfsdb bench` runs it on a scratch database of the server it is given,
// and tests/bench's TestLoadgen (KFS_LOADGEN=1, `make loadgen`) runs it with
// every knob. It imports only the library, pgx and uuid, never the test
// harness, so the deploy binary can carry it.
package loadgen

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/knowledgefs/kfsdb/kfstype"
	"github.com/knowledgefs/kfsdb/memqueue"
	"github.com/knowledgefs/kfsdb/relay"
	"github.com/knowledgefs/kfsdb/repo"
	"github.com/knowledgefs/kfsdb/worker"
)

// Defaults of Config.
const (
	DrainTimeoutDefault = 2 * time.Minute
	DurationDefault     = 10 * time.Second
	MaxAttemptsDefault  = 100_000
	ProducersDefault    = 8
	WorkersDefault      = 8
)

// Config configures Run.
type Config struct {
	// DatabaseURL is a migrated database; Run adds a tenant of its own.
	// Required.
	DatabaseURL string
	// DrainTimeout bounds the wait, after Duration, for the attempts
	// started to succeed. Defaults to 2 min.
	DrainTimeout time.Duration
	// Duration is how long the producers run. Defaults to 10 s.
	Duration time.Duration
	// Logger receives the relay's and worker's logs. Defaults to discarding.
	Logger *slog.Logger
	// MaxAttempts is how many document assets are created up front: the
	// producers stop early when they have started them all. Defaults to
	// 100,000.
	MaxAttempts int
	// Producers is how many goroutines call Start. Defaults to 8.
	Producers int
	// Rate paces the producers: attempts started per second by all of them
	// together (attempt i is due at i/Rate after the start), so latencies
	// can be compared at one offered load. 0 (the default): unpaced, each
	// producer starts its next attempt as soon as its Start returns.
	Rate float64
	// Spaces is how many knowledge spaces (each with its own candidate
	// publication) the assets are spread over, round robin. With one,
	// every Start's foreign-key check locks the same knowledge_spaces row
	// FOR KEY SHARE, as a bulk import into one space does. Defaults to 1.
	Spaces int
	// Workers is the worker's Concurrency. Defaults to 8.
	Workers int
	// HoldSnapshot keeps a REPEATABLE READ transaction with a snapshot
	// open on another connection for the whole run, as a long report or a
	// forgotten session would: vacuum cannot remove any row version that
	// dies meanwhile. Defaults to false.
	HoldSnapshot bool
	// StepCheckpoints makes the handler write each checkpoint (five
	// Advance calls) before Complete, as a handler that persists progress
	// does; otherwise it completes through them in one write. Defaults to
	// false.
	StepCheckpoints bool
	// AsyncProgressCommits is repo.Config.AsyncProgressCommits for the
	// relay and the worker (the producers' Start is synchronous either
	// way). Defaults to false.
	AsyncProgressCommits bool
	// SingleCompletions is worker.Config.SingleCompletions: each slot
	// completes its attempt itself instead of handing it to the worker's
	// completer. Defaults to false.
	SingleCompletions bool
	// PendingDeliveryWait is worker.Config.PendingDeliveryWait (0: its
	// default; negative: deliveries that beat their mark are handed back
	// at once).
	PendingDeliveryWait time.Duration
}

// StatementStats are the latencies of one named statement.
type StatementStats struct {
	Count    int
	P50, P99 time.Duration
}

// TableStats are pg_stat_user_tables figures after the run.
type TableStats struct {
	LiveTuples, DeadTuples, Updates, HOTUpdates int64
}

// Result is what Run measured.
type Result struct {
	Producers, Workers, Spaces int
	// Rate is Config's (0: unpaced).
	Rate float64
	// StepCheckpoints, AsyncProgressCommits and SingleCompletions are
	// Config's.
	StepCheckpoints, AsyncProgressCommits, SingleCompletions bool
	Duration                                                 time.Duration
	// Started and Completed count attempts over the whole run (window and
	// drain); CompletedInWindow only those that succeeded within Duration.
	Started, Completed, CompletedInWindow int64
	// Throughput is CompletedInWindow / Duration.
	Throughput float64
	// StartToSucceeded are p50 and p99 over every completed attempt, from
	// just before Start to the worker's acknowledgement (after Complete).
	StartToSucceededP50, StartToSucceededP99 time.Duration
	// RoundTrips is the statements sent per completed attempt.
	RoundTrips float64
	// WALBytes is pg_wal_lsn_diff over the run per completed attempt.
	WALBytes float64
	// Statements are per-statement latencies, by sqlc query name.
	Statements map[string]StatementStats
	// Tables are the two tables' statistics after the run.
	Tables map[string]TableStats
	// Drained is false if DrainTimeout passed with attempts unfinished.
	Drained bool
}

// Run drives the lifecycle load described in the package documentation.
func Run(ctx context.Context, cfg *Config) (*Result, error) {
	c := *cfg
	if c.DatabaseURL == "" {
		return nil, errors.New("loadgen: DatabaseURL is required")
	}
	c.DrainTimeout = cmp.Or(c.DrainTimeout, DrainTimeoutDefault)
	c.Duration = cmp.Or(c.Duration, DurationDefault)
	c.MaxAttempts = cmp.Or(c.MaxAttempts, MaxAttemptsDefault)
	c.Producers = cmp.Or(c.Producers, ProducersDefault)
	c.Spaces = max(c.Spaces, 1)
	c.Workers = cmp.Or(c.Workers, WorkersDefault)
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}

	pcfg, err := pgxpool.ParseConfig(c.DatabaseURL)
	if err != nil {
		return nil, fmt.Errorf("loadgen: %w", err)
	}
	tr := &tracer{lat: map[string][]time.Duration{}}
	pcfg.ConnConfig.Tracer = tr
	pcfg.MaxConns = int32(c.Producers + c.Workers + 4)
	pool, err := pgxpool.NewWithConfig(ctx, pcfg)
	if err != nil {
		return nil, fmt.Errorf("loadgen: connect: %w", err)
	}
	defer pool.Close()

	sc, err := setup(ctx, pool, c.MaxAttempts, c.Spaces)
	if err != nil {
		return nil, err
	}
	if c.HoldSnapshot {
		conn, err := pgx.Connect(ctx, c.DatabaseURL)
		if err != nil {
			return nil, fmt.Errorf("loadgen: connect snapshot holder: %w", err)
		}
		defer conn.Close(context.WithoutCancel(ctx))
		tx, err := conn.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead})
		if err != nil {
			return nil, fmt.Errorf("loadgen: begin snapshot holder: %w", err)
		}
		defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
		var n int64
		if err := tx.QueryRow(ctx, "SELECT count(*) FROM document_compilation_outbox").Scan(&n); err != nil {
			return nil, fmt.Errorf("loadgen: take snapshot: %w", err)
		}
	}
	var walBefore string
	if err := pool.QueryRow(ctx, "SELECT pg_current_wal_lsn()::text").Scan(&walBefore); err != nil {
		return nil, fmt.Errorf("loadgen: wal position: %w", err)
	}

	r := repo.New(&repo.Config{AsyncProgressCommits: c.AsyncProgressCommits})
	q := memqueue.New()
	var (
		mu      sync.Mutex
		starts  = make(map[uuid.UUID]time.Time, 1<<14)
		acks    = make(map[uuid.UUID]time.Time, 1<<14)
		started atomic.Int64
		acked   atomic.Int64
	)
	// handled holds the attempts whose handler returned nil: the worker
	// also acknowledges stale deliveries (a redispatched copy whose first
	// delivery sat in the queue past its deadline), which must not count
	// as succeeded.
	var handled sync.Map
	src := &ackSource{q: q, onAck: func(id uuid.UUID) {
		if _, ok := handled.Load(id); !ok {
			return
		}
		now := time.Now()
		mu.Lock()
		if _, dup := acks[id]; !dup {
			acks[id] = now
			acked.Add(1)
		}
		mu.Unlock()
	}}
	rl, err := relay.New(pool, q, &relay.Config{Logger: c.Logger, Repo: r})
	if err != nil {
		return nil, err
	}
	wk, err := worker.New(pool, src, noopHandler(sc, &handled, c.StepCheckpoints), &worker.Config{Logger: c.Logger, Repo: r, Concurrency: c.Workers, SingleCompletions: c.SingleCompletions, PendingDeliveryWait: c.PendingDeliveryWait})
	if err != nil {
		return nil, err
	}
	rctx, stopRuntime := context.WithCancel(ctx)
	defer stopRuntime()
	var rwg sync.WaitGroup
	rwg.Go(func() { _ = rl.Run(rctx) })
	rwg.Go(func() { _ = wk.Run(rctx) })

	stmts0 := tr.count.Load()
	begin := time.Now()
	end := begin.Add(c.Duration)
	var next atomic.Int64
	var pwg sync.WaitGroup
	var prodErr atomic.Pointer[error]
	for range c.Producers {
		pwg.Go(func() {
			for time.Now().Before(end) && ctx.Err() == nil {
				i := int(next.Add(1) - 1)
				if i >= len(sc.assets) {
					return
				}
				if c.Rate > 0 {
					time.Sleep(time.Until(begin.Add(time.Duration(float64(i) / c.Rate * float64(time.Second)))))
					if !time.Now().Before(end) {
						return
					}
				}
				t0 := time.Now()
				res, err := r.Start(ctx, pool, &repo.StartParams{TenantID: sc.tenant, KnowledgeSpaceID: sc.spaceOf(i),
					DocumentAssetID: sc.assets[i], DocumentVersion: 1, PublicationGenerationID: sc.generation})
				if err != nil {
					prodErr.Store(&err)
					return
				}
				mu.Lock()
				starts[res.Attempt.ID] = t0
				mu.Unlock()
				started.Add(1)
			}
		})
	}
	pwg.Wait()
	if p := prodErr.Load(); p != nil {
		return nil, fmt.Errorf("loadgen: start: %w", *p)
	}
	drained := false
	for deadline := time.Now().Add(c.DrainTimeout); time.Now().Before(deadline) && ctx.Err() == nil; {
		if acked.Load() >= started.Load() {
			drained = true
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	stmts := tr.count.Load() - stmts0
	var walAfter string
	if err := pool.QueryRow(ctx, "SELECT pg_current_wal_lsn()::text").Scan(&walAfter); err != nil {
		return nil, fmt.Errorf("loadgen: wal position: %w", err)
	}
	stopRuntime()
	rwg.Wait()

	res := &Result{Producers: c.Producers, Workers: c.Workers, Spaces: c.Spaces, Rate: c.Rate, StepCheckpoints: c.StepCheckpoints, AsyncProgressCommits: c.AsyncProgressCommits, SingleCompletions: c.SingleCompletions, Duration: c.Duration, Drained: drained,
		Started: started.Load(), Statements: map[string]StatementStats{}, Tables: map[string]TableStats{}}
	mu.Lock()
	var lat []time.Duration
	for id, t1 := range acks {
		if t1.Before(end) || t1.Equal(end) {
			res.CompletedInWindow++
		}
		if t0, ok := starts[id]; ok {
			lat = append(lat, t1.Sub(t0))
		}
	}
	mu.Unlock()
	res.Completed = int64(len(lat))
	res.Throughput = float64(res.CompletedInWindow) / c.Duration.Seconds()
	res.StartToSucceededP50, res.StartToSucceededP99 = percentile(lat, 0.50), percentile(lat, 0.99)
	if res.Completed > 0 {
		res.RoundTrips = float64(stmts) / float64(res.Completed)
	}
	for name, d := range tr.snapshot() {
		res.Statements[name] = StatementStats{Count: len(d), P50: percentile(d, 0.50), P99: percentile(d, 0.99)}
	}

	// Succeeded in the database, not only acknowledged.
	var succeeded int64
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM document_compilation_attempts WHERE tenant_id = $1 AND run_state = 'succeeded'`,
		sc.tenant).Scan(&succeeded); err != nil {
		return nil, fmt.Errorf("loadgen: count: %w", err)
	}
	if succeeded != res.Completed {
		return nil, fmt.Errorf("loadgen: %d attempts acknowledged but %d succeeded", res.Completed, succeeded)
	}
	var wal float64
	if err := pool.QueryRow(ctx, "SELECT pg_wal_lsn_diff($1::text::pg_lsn, $2::text::pg_lsn)::float8", walAfter, walBefore).Scan(&wal); err != nil {
		return nil, fmt.Errorf("loadgen: wal diff: %w", err)
	}
	if res.Completed > 0 {
		res.WALBytes = wal / float64(res.Completed)
	}
	// Backends flush their table statistics when they exit: close the
	// pool first, then read them on a fresh connection.
	pool.Close()
	if err := tableStats(ctx, c.DatabaseURL, res.Tables); err != nil {
		return nil, err
	}
	return res, nil
}

// scenario is the tenant, spaces and assets of one run; asset i is in
// space i % len(spaces).
type scenario struct {
	tenant     string
	generation uuid.UUID
	spaces     []spaceSpec
	byID       map[uuid.UUID]*spaceSpec
	assets     []uuid.UUID
}

// spaceOf is the knowledge space of asset i.
func (sc *scenario) spaceOf(i int) uuid.UUID { return sc.spaces[i%len(sc.spaces)].id }

// spaceSpec is one knowledge space and the candidate its attempts bind.
type spaceSpec struct {
	id, candidate uuid.UUID
	fingerprint   string
}

func setup(ctx context.Context, pool *pgxpool.Pool, n, spaces int) (*scenario, error) {
	sc := &scenario{tenant: "loadgen-" + uuid.NewString()[:8], generation: uuid.New(), byID: map[uuid.UUID]*spaceSpec{}}
	sc.spaces = make([]spaceSpec, spaces)
	var spaceIDs, candidates []uuid.UUID
	var fingerprints []string
	for i := range sc.spaces {
		sp := &sc.spaces[i]
		sp.id, sp.candidate = uuid.New(), uuid.New()
		sum := sha256.Sum256([]byte(sp.candidate.String()))
		sp.fingerprint = "projection-set-sha256:" + hex.EncodeToString(sum[:])
		sc.byID[sp.id] = sp
		spaceIDs, candidates, fingerprints = append(spaceIDs, sp.id), append(candidates, sp.candidate), append(fingerprints, sp.fingerprint)
	}
	sc.assets = make([]uuid.UUID, n)
	assetSpaces := make([]uuid.UUID, n)
	for i := range sc.assets {
		sc.assets[i] = uuid.New()
		assetSpaces[i] = sc.spaceOf(i)
	}
	for _, s := range []struct {
		sql  string
		args []any
	}{
		{`INSERT INTO knowledge_spaces (id, tenant_id, slug, name)
			SELECT s, $2, 'loadgen-' || n, 'Loadgen' FROM unnest($1::uuid[]) WITH ORDINALITY AS t(s, n)`, []any{spaceIDs, sc.tenant}},
		{`INSERT INTO projection_set_publications (id, tenant_id, knowledge_space_id, fingerprint, projection_version, status)
			SELECT c, $2, s, f, 1, 'candidate' FROM unnest($1::uuid[], $3::uuid[], $4::text[]) AS t(c, s, f)`,
			[]any{candidates, sc.tenant, spaceIDs, fingerprints}},
		{`INSERT INTO document_assets (id, knowledge_space_id, filename, mime_type, object_key, sha256, size_bytes, version)
			SELECT a, s, 'doc.pdf', 'application/pdf', 'objects/' || a, md5(a::text) || md5(a::text), 1024, 1
			  FROM unnest($1::uuid[], $2::uuid[]) AS t(a, s)`, []any{sc.assets, assetSpaces}},
		{`VACUUM ANALYZE knowledge_spaces, document_assets, projection_set_publications,
			document_compilation_attempts, document_compilation_outbox`, nil},
	} {
		if _, err := pool.Exec(ctx, s.sql, s.args...); err != nil {
			return nil, fmt.Errorf("loadgen: setup: %w", err)
		}
	}
	// Best effort (superuser or pg_checkpoint): start from a checkpoint.
	_, _ = pool.Exec(ctx, "CHECKPOINT")
	return sc, nil
}

// noopHandler does no work. With steps it advances one checkpoint at a
// time (Advance moves at most one step) to smoke_eval_passed, binding the
// scenario's candidate at projection_built, and the worker then completes
// the attempt; without, the worker completes through every checkpoint in
// the one write after the lease.
func noopHandler(sc *scenario, handled *sync.Map, steps bool) worker.HandlerFunc {
	return func(ctx context.Context, job *worker.Job) error {
		sp := sc.byID[job.Attempt.KnowledgeSpaceID]
		if !steps {
			job.CompleteThrough(sp.candidate, sp.fingerprint)
			handled.Store(job.Attempt.ID, struct{}{})
			return nil
		}
		for _, cp := range []kfstype.Checkpoint{kfstype.CheckpointParsed, kfstype.CheckpointOutlineBuilt, kfstype.CheckpointNodesGenerated} {
			if err := job.Advance(ctx, cp); err != nil {
				return err
			}
		}
		if err := job.BindCandidate(ctx, kfstype.CheckpointProjectionBuilt, sp.candidate, sp.fingerprint); err != nil {
			return err
		}
		if err := job.Advance(ctx, kfstype.CheckpointSmokeEvalPassed); err != nil {
			return err
		}
		handled.Store(job.Attempt.ID, struct{}{})
		return nil
	}
}

// ackSource records when each delivery is acknowledged: the worker
// acknowledges only after its outcome (here Complete) committed.
type ackSource struct {
	q     *memqueue.Queue
	onAck func(uuid.UUID)
}

func (s *ackSource) Receive(ctx context.Context) (worker.Message, error) {
	m, err := s.q.Receive(ctx)
	if err != nil {
		return nil, err
	}
	return &ackMessage{Message: m, onAck: s.onAck}, nil
}

type ackMessage struct {
	worker.Message
	onAck func(uuid.UUID)
}

func (m *ackMessage) Ack(ctx context.Context) error {
	err := m.Message.Ack(ctx)
	m.onAck(m.Delivery().AttemptID)
	return err
}

// tracer counts statements and records their latencies by the sqlc query
// name in their first line ("-- name: X :one").
type tracer struct {
	count atomic.Int64
	mu    sync.Mutex
	lat   map[string][]time.Duration
}

type traceKey struct{}

type traceStart struct {
	name string
	t0   time.Time
}

func (t *tracer) TraceQueryStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceQueryStartData) context.Context {
	t.count.Add(1)
	return context.WithValue(ctx, traceKey{}, traceStart{name: queryName(d.SQL), t0: time.Now()})
}

func (t *tracer) TraceQueryEnd(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryEndData) {
	s, ok := ctx.Value(traceKey{}).(traceStart)
	if !ok {
		return
	}
	d := time.Since(s.t0)
	t.mu.Lock()
	t.lat[s.name] = append(t.lat[s.name], d)
	t.mu.Unlock()
}

func (t *tracer) snapshot() map[string][]time.Duration {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := make(map[string][]time.Duration, len(t.lat))
	for k, v := range t.lat {
		out[k] = append([]time.Duration(nil), v...)
	}
	return out
}

func queryName(sql string) string {
	if rest, ok := strings.CutPrefix(sql, "-- name: "); ok {
		if i := strings.IndexByte(rest, ' '); i > 0 {
			return rest[:i]
		}
	}
	first, _, _ := strings.Cut(strings.TrimSpace(sql), "\n")
	if len(first) > 40 {
		first = first[:40]
	}
	return first
}

func percentile(d []time.Duration, p float64) time.Duration {
	if len(d) == 0 {
		return 0
	}
	s := append([]time.Duration(nil), d...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	return s[min(len(s)-1, int(p*float64(len(s))))]
}

func tableStats(ctx context.Context, url string, out map[string]TableStats) error {
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return fmt.Errorf("loadgen: table stats: %w", err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	time.Sleep(500 * time.Millisecond) // exiting backends flush asynchronously
	rows, err := conn.Query(ctx, `SELECT relname, n_live_tup, n_dead_tup, n_tup_upd, n_tup_hot_upd
		FROM pg_stat_user_tables WHERE relname IN ('document_compilation_attempts', 'document_compilation_outbox')`)
	if err != nil {
		return fmt.Errorf("loadgen: table stats: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var name string
		var s TableStats
		if err := rows.Scan(&name, &s.LiveTuples, &s.DeadTuples, &s.Updates, &s.HOTUpdates); err != nil {
			return err
		}
		out[name] = s
	}
	return rows.Err()
}

// WriteTable writes the result as Markdown.
func (r *Result) WriteTable(w io.Writer) {
	fmt.Fprintf(w, "| metric | value |\n|---|---:|\n")
	fmt.Fprintf(w, "| producers / worker slots / knowledge spaces / duration | %d / %d / %d / %s |\n", r.Producers, r.Workers, r.Spaces, r.Duration)
	rate := "unpaced"
	if r.Rate > 0 {
		rate = fmt.Sprintf("%.0f attempts/s", r.Rate)
	}
	fmt.Fprintf(w, "| offered rate | %s |\n", rate)
	handler := "complete through the checkpoints in one write (CompleteThrough)"
	if r.StepCheckpoints {
		handler = "five Advance writes, then Complete"
	}
	commits := "synchronous"
	if r.AsyncProgressCommits {
		commits = "asynchronous for claim, mark and lease (AsyncProgressCommits); Start and Complete synchronous"
	}
	completions := "batched by the worker's completer (CompleteMany); slots do not wait"
	if r.SingleCompletions {
		completions = "one statement per attempt, in its slot"
	}
	fmt.Fprintf(w, "| handler | %s |\n| progress commits | %s |\n| completions | %s |\n", handler, commits, completions)
	fmt.Fprintf(w, "| attempts started / succeeded (drained: %v) | %d / %d |\n", r.Drained, r.Started, r.Completed)
	fmt.Fprintf(w, "| lifecycle throughput (succeeded within the window) | %.0f attempts/s |\n", r.Throughput)
	fmt.Fprintf(w, "| start → succeeded p50 / p99 | %s / %s |\n", r.StartToSucceededP50.Round(time.Millisecond), r.StartToSucceededP99.Round(time.Millisecond))
	fmt.Fprintf(w, "| round trips per attempt | %.2f |\n", r.RoundTrips)
	fmt.Fprintf(w, "| WAL bytes per attempt | %.0f |\n", r.WALBytes)
	for _, t := range []string{"document_compilation_attempts", "document_compilation_outbox"} {
		s := r.Tables[t]
		hot := 0.0
		if s.Updates > 0 {
			hot = 100 * float64(s.HOTUpdates) / float64(s.Updates)
		}
		fmt.Fprintf(w, "| %s: live / dead tuples after, HOT updates | %d / %d, %.1f%% of %d |\n", t, s.LiveTuples, s.DeadTuples, hot, s.Updates)
	}
	fmt.Fprintf(w, "\n| statement | count | p50 | p99 |\n|---|---:|---:|---:|\n")
	names := make([]string, 0, len(r.Statements))
	for n := range r.Statements {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		s := r.Statements[n]
		fmt.Fprintf(w, "| %s | %d | %s | %s |\n", n, s.Count, s.P50.Round(10*time.Microsecond), s.P99.Round(10*time.Microsecond))
	}
}
