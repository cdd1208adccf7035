package main

import (
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
	"text/tabwriter"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/knowledgefs/kfsdb/kfstype"
	"github.com/knowledgefs/kfsdb/memqueue"
	"github.com/knowledgefs/kfsdb/observe"
	"github.com/knowledgefs/kfsdb/relay"
	"github.com/knowledgefs/kfsdb/repo"
	"github.com/knowledgefs/kfsdb/worker"
)

// Timings of the demo runtime: short, so a few hundred attempts with
// retries, lease expiries and an outage finish in seconds.
const (
	demoWorkers           = 4
	demoWorkerConcurrency = 4
	demoProducers         = 4
	demoLease             = 2 * time.Second // heartbeat every third
	demoRetryBase         = 100 * time.Millisecond
	demoRetryCap          = time.Second
	demoPollInterval      = 200 * time.Millisecond
	demoDispatchBase      = 100 * time.Millisecond
	demoDispatchCap       = time.Second
	// demoMaxDispatch: a row must survive the outage on backoff alone. Its
	// failed publications back off 0.1+0.2+0.4+0.8+1 s (at least 2.5 s
	// for a fresh row, 1.8 s for one already published three times) before
	// the 6th dead-letters it, longer than demoOutage.
	demoMaxDispatch     = 6
	demoVisibility      = 3 * time.Second
	demoLockDuration    = 2 * time.Second
	demoPublishTimeout  = time.Second
	demoOutage          = 1500 * time.Millisecond
	demoStartSpread     = 4 * time.Second // producers pace their starts over this
	demoReleaseAfter    = 500 * time.Millisecond
	demoCancelAfter     = 300 * time.Millisecond
	demoControlWait     = 20 * time.Second
	demoDoomedWorkerID  = "demo-doomed-worker"
	demoPoolMaxConns    = 32
	demoSettlePoll      = 100 * time.Millisecond
	demoProgressEvery   = time.Second
	demoHandlerMaxBlock = 10 * time.Second
)

var demoTenants = []string{"tenant-acme", "tenant-globex", "tenant-initech"}

const demoSpacesPerTenant = 3

// errPoison is what the demo's publisher answers for attempts the broker
// refuses (dead-letter scenarios).
var errPoison = errors.New("demo broker: message rejected (poison)")

// workload runs the demo's attempts through a real relay and real workers
// over an in-process queue, and checks the outcome.
type workload struct {
	out     io.Writer
	log     *slog.Logger
	pool    *pgxpool.Pool
	repo    *repo.Repo
	lat     *latencies
	metrics *observe.Counts
	queue   *memqueue.Queue
	entries []*entry
	byAsset map[uuid.UUID]*entry // read-only once built
	// byAttempt maps attempt ids to entries (uuid.UUID → *entry).
	byAttempt sync.Map

	started    atomic.Int32
	outageOn   atomic.Bool
	outageDone chan struct{}

	violationsMu sync.Mutex
	violations   map[string][]string // check → examples
	leaseChecks  atomic.Int64
	t0           time.Time
}

func newWorkload(out io.Writer, log *slog.Logger, pool *pgxpool.Pool, lat *latencies, n int, seed uint64) *workload {
	w := &workload{
		out: out, log: log, pool: pool, repo: repo.New(nil), lat: lat, metrics: &observe.Counts{},
		queue: memqueue.New(), byAsset: make(map[uuid.UUID]*entry, n),
		outageDone: make(chan struct{}), violations: make(map[string][]string),
	}
	spaces := make(map[string][]uuid.UUID)
	for _, t := range demoTenants {
		for range demoSpacesPerTenant {
			spaces[t] = append(spaces[t], uuid.New())
		}
	}
	for i, sc := range planScenarios(n, seed) {
		tenant := demoTenants[i%len(demoTenants)]
		e := &entry{
			idx: i, sc: sc, tenantID: tenant, spaceID: spaces[tenant][(i/len(demoTenants))%demoSpacesPerTenant],
			assetID: uuid.New(), pubID: uuid.New(),
			handlerStarted: make(chan struct{}), ended: make(chan struct{}),
		}
		e.fingerprint = fingerprint(e.pubID.String())
		w.entries = append(w.entries, e)
		w.byAsset[e.assetID] = e
	}
	return w
}

func fingerprint(seed string) string {
	sum := sha256.Sum256([]byte(seed))
	return "projection-set-sha256:" + hex.EncodeToString(sum[:])
}

func hash(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:])
}

func (w *workload) violate(check, format string, args ...any) {
	w.violationsMu.Lock()
	defer w.violationsMu.Unlock()
	w.violations[check] = append(w.violations[check], fmt.Sprintf(format, args...))
}

func (w *workload) entryByAttempt(id uuid.UUID) *entry {
	if v, ok := w.byAttempt.Load(id); ok {
		return v.(*entry)
	}
	return nil
}

func (w *workload) elapsed() string {
	return fmt.Sprintf("%5.1fs", time.Since(w.t0).Seconds())
}

// setup inserts the knowledge spaces and one candidate publication per
// attempt (document assets come with each start).
func (w *workload) setup(ctx context.Context) error {
	b := &pgx.Batch{}
	seen := map[uuid.UUID]bool{}
	for _, e := range w.entries {
		if !seen[e.spaceID] {
			seen[e.spaceID] = true
			b.Queue(`INSERT INTO knowledge_spaces (id, tenant_id, slug, name) VALUES ($1, $2, $3, $4)`,
				e.spaceID, e.tenantID, "space-"+e.spaceID.String()[:8], "Demo space "+e.spaceID.String()[:8])
		}
	}
	for _, e := range w.entries {
		b.Queue(`INSERT INTO projection_set_publications
			(id, tenant_id, knowledge_space_id, fingerprint, projection_version, status)
			VALUES ($1, $2, $3, $4, 1, 'candidate')`, e.pubID, e.tenantID, e.spaceID, e.fingerprint)
	}
	tx, err := w.pool.Begin(ctx)
	if err != nil {
		return fmt.Errorf("setup: begin: %w", err)
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	if err := tx.SendBatch(ctx, b).Close(); err != nil {
		return fmt.Errorf("setup: insert spaces and publications: %w", err)
	}
	return tx.Commit(ctx)
}

// insertAsset inserts the attempt's document asset (version 1).
func insertAsset(ctx context.Context, db repo.DBTX, e *entry) error {
	_, err := db.Exec(ctx, `INSERT INTO document_assets
		(id, knowledge_space_id, filename, mime_type, object_key, sha256, size_bytes, version)
		VALUES ($1, $2, $3, 'application/pdf', $4, $5, $6, 1)`,
		e.assetID, e.spaceID, fmt.Sprintf("report-%04d.pdf", e.idx), "objects/"+e.assetID.String(), hash(e.assetID.String()), 1024+e.idx)
	if err != nil {
		return fmt.Errorf("insert document asset %s: %w", e.assetID, err)
	}
	return nil
}

// start inserts the entry's document asset and starts its attempt: in one
// transaction (the outbox pattern) for inTx scenarios and every third
// other one, else as two statements on the pool.
func (w *workload) start(ctx context.Context, e *entry) error {
	p := &repo.StartParams{
		TenantID: e.tenantID, KnowledgeSpaceID: e.spaceID, DocumentAssetID: e.assetID, DocumentVersion: 1,
		PublicationGenerationID: uuid.New(), MaxExecutionAttempts: e.sc.maxAttempts, Deferred: e.sc.deferred,
	}
	var res *repo.StartResult
	if e.sc.inTx || e.idx%3 == 0 {
		tx, err := w.pool.Begin(ctx)
		if err != nil {
			return fmt.Errorf("start attempt %d: begin: %w", e.idx, err)
		}
		defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
		if err := insertAsset(ctx, tx, e); err != nil {
			return err
		}
		if err := w.lat.time(latCall+"Start (in tx)", func() (err error) {
			res, err = w.repo.Start(ctx, tx, p)
			return err
		}); err != nil {
			return fmt.Errorf("start attempt %d (%s): %w", e.idx, e.sc.name, err)
		}
		// Known before the relay can see the row: routing by attempt id
		// (dead letters, crashes) cannot miss it.
		w.register(e, res.Attempt.ID)
		if err := tx.Commit(ctx); err != nil {
			return fmt.Errorf("start attempt %d: commit: %w", e.idx, err)
		}
	} else {
		if err := insertAsset(ctx, w.pool, e); err != nil {
			return err
		}
		if err := w.lat.time(latCall+"Start", func() (err error) {
			res, err = w.repo.Start(ctx, w.pool, p)
			return err
		}); err != nil {
			return fmt.Errorf("start attempt %d (%s): %w", e.idx, e.sc.name, err)
		}
		w.register(e, res.Attempt.ID)
	}
	if !res.Created {
		return fmt.Errorf("start attempt %d: Start returned the existing attempt %s for a fresh document", e.idx, res.Attempt.ID)
	}
	w.started.Add(1)
	return nil
}

func (w *workload) register(e *entry, id uuid.UUID) {
	e.attemptID.Store(&id)
	w.byAttempt.Store(id, e)
}

func (w *workload) ref(e *entry) repo.AttemptRef {
	return repo.AttemptRef{TenantID: e.tenantID, KnowledgeSpaceID: e.spaceID, AttemptID: e.attempt()}
}

// control runs the control-plane action of e's scenario, if any, after
// e was started.
func (w *workload) control(ctx context.Context, e *entry) error {
	switch e.sc.name {
	case scCancelDeferred:
		if err := sleepCtx(ctx, demoCancelAfter); err != nil {
			return err
		}
		return w.lat.time(latCall+"Cancel", func() error {
			_, err := w.repo.Cancel(ctx, w.pool, &repo.CancelParams{AttemptRef: w.ref(e), Reason: new("upload withdrawn before compilation")})
			return err
		})
	case scDeferredRelease:
		if err := sleepCtx(ctx, demoReleaseAfter); err != nil {
			return err
		}
		ref := w.ref(e)
		return w.lat.time(latCall+"ReleaseDeferred", func() error {
			_, err := w.repo.ReleaseDeferred(ctx, w.pool, &ref)
			return err
		})
	case scCancelRunning, scSupersedeRunning:
		select {
		case <-e.handlerStarted:
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(demoControlWait):
			return fmt.Errorf("attempt %d (%s): no handler started within %s", e.idx, e.sc.name, demoControlWait)
		}
		defer close(e.ended)
		if e.sc.name == scCancelRunning {
			return w.lat.time(latCall+"Cancel", func() error {
				_, err := w.repo.Cancel(ctx, w.pool, &repo.CancelParams{AttemptRef: w.ref(e), Reason: new("canceled by the operator")})
				return err
			})
		}
		return w.lat.time(latCall+"Supersede", func() error {
			_, err := w.repo.Supersede(ctx, w.pool, &repo.SupersedeParams{AttemptRef: w.ref(e), Reason: new("document version 2 uploaded")})
			return err
		})
	case scManualRetry, scDeadLetterRetry:
		deadline := time.Now().Add(demoControlWait)
		for {
			var a *kfstype.Attempt
			if err := w.lat.time(latCall+"GetAttempt", func() (err error) {
				a, err = w.repo.GetAttempt(ctx, w.pool, e.tenantID, e.attempt())
				return err
			}); err != nil {
				return err
			}
			if a.RunState == kfstype.RunStateFailed {
				break
			}
			if a.RunState.Terminal() {
				return fmt.Errorf("attempt %d (%s): ended %s before the manual retry", e.idx, e.sc.name, a.RunState)
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("attempt %d (%s): not failed within %s (is %s)", e.idx, e.sc.name, demoControlWait, a.RunState)
			}
			if err := sleepCtx(ctx, 100*time.Millisecond); err != nil {
				return err
			}
		}
		e.retried.Store(true)
		ref := w.ref(e)
		return w.lat.time(latCall+"RetryFailed", func() error {
			_, err := w.repo.RetryFailed(ctx, w.pool, &ref)
			return err
		})
	}
	return nil
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// Work is the demo's worker.Handler: it behaves as e's scenario says.
func (w *workload) Work(ctx context.Context, job *worker.Job) error {
	e := w.byAsset[job.Attempt.DocumentAssetID]
	if e == nil {
		return worker.Fatal("DEMO_UNKNOWN_ATTEMPT", fmt.Errorf("attempt %s is not the demo's", job.Attempt.ID))
	}
	if e.active.Add(1) > 1 {
		w.violate(checkNoOverlap, "attempt %d (%s): two handlers at once", e.idx, e.sc.name)
	}
	defer e.active.Add(-1)
	e.executions.Add(1)
	w.checkLease(ctx, e, job)

	switch e.sc.name {
	case scRetryOnce:
		if job.Attempt.ExecutionAttempts == 1 {
			if err := w.advanceTo(ctx, job, e, kfstype.CheckpointParsed); err != nil {
				return err
			}
			return worker.Retryable(errors.New("embedding service timed out"))
		}
	case scFatal:
		if err := w.advanceTo(ctx, job, e, kfstype.CheckpointParsed); err != nil {
			return err
		}
		return worker.Fatal(kfstype.ErrorCodeCompilationFailed, errors.New("PDF is encrypted"))
	case scPanic:
		panic(fmt.Sprintf("demo: nil outline node in attempt %d", e.idx))
	case scExhausted:
		return worker.Retryable(errors.New("parser backend unavailable"))
	case scManualRetry:
		if !e.retried.Load() {
			if err := w.advanceTo(ctx, job, e, kfstype.CheckpointNodesGenerated); err != nil {
				return err
			}
			return worker.Fatal(kfstype.ErrorCodeCompilationFailed, errors.New("model quota exceeded"))
		}
	case scCancelRunning, scSupersedeRunning:
		if err := w.advanceTo(ctx, job, e, kfstype.CheckpointParsed); err != nil {
			return err
		}
		e.startedOnce.Do(func() { close(e.handlerStarted) })
		select {
		case <-e.ended:
		case <-ctx.Done(): // the heartbeat saw the lease go
			return context.Cause(ctx)
		case <-time.After(demoHandlerMaxBlock):
		}
		// Carries on as if nothing happened; the next write is refused.
	}
	return w.advanceTo(ctx, job, e, kfstype.CheckpointSmokeEvalPassed)
}

// checkLease verifies, as a handler starts, that the database has the
// attempt running under this handler's unexpired lease: a handler must
// never run for an attempt that is terminal or someone else's.
func (w *workload) checkLease(ctx context.Context, e *entry, job *worker.Job) {
	w.leaseChecks.Add(1)
	var state string
	var token *uuid.UUID
	var live bool
	err := w.pool.QueryRow(ctx, `SELECT run_state, lease_token, coalesce(lease_expires_at > now(), false)
		FROM document_compilation_attempts WHERE id = $1`, job.Attempt.ID).Scan(&state, &token, &live)
	switch {
	case err != nil:
		w.violate(checkLeaseHeld, "attempt %d: could not read it: %v", e.idx, err)
	case state != string(kfstype.RunStateRunning) || token == nil || *token != job.Lease().Token || !live:
		w.violate(checkLeaseHeld, "attempt %d (%s): handler started while the attempt is %s (own lease: %t, unexpired: %t)",
			e.idx, e.sc.name, state, token != nil && *token == job.Lease().Token, live)
	}
}

// advanceTo walks the job's checkpoints up to target, binding e's
// candidate publication at projection_built; each step "works" a few
// milliseconds.
func (w *workload) advanceTo(ctx context.Context, job *worker.Job, e *entry, target kfstype.Checkpoint) error {
	cps := kfstype.Checkpoints()
	for r := job.Attempt.Checkpoint.Rank() + 1; r <= target.Rank(); r++ {
		cp := cps[r]
		if err := sleepCtx(ctx, time.Duration(1+(e.idx+r)%4)*time.Millisecond); err != nil {
			return err
		}
		var err error
		if cp == kfstype.CheckpointProjectionBuilt && job.Attempt.CandidatePublicationID == nil {
			err = job.BindCandidate(ctx, cp, e.pubID, e.fingerprint)
		} else {
			err = job.Advance(ctx, cp)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// demoPublisher is the relay's Publisher: memqueue, except for attempts
// the "broker" rejects (dead-letter scenarios).
type demoPublisher struct {
	w     *workload
	inner relay.Publisher
}

func (p *demoPublisher) Publish(ctx context.Context, msg *relay.Message) (*relay.Publication, error) {
	if e := p.w.entryByAttempt(msg.AttemptID); e != nil {
		if e.sc.name == scDeadLetter || (e.sc.name == scDeadLetterRetry && !e.retried.Load()) {
			e.rejected.Add(1)
			return nil, errPoison
		}
	}
	return p.inner.Publish(ctx, msg)
}

// crashingSource is the workers' Source: memqueue, except that the first
// delivery of each worker_crash attempt goes to a worker that takes the
// lease, does some work and dies without a word (no heartbeat, no
// outcome). The relay republishes the attempt once the lease expires.
type crashingSource struct {
	w     *workload
	inner worker.Source
}

func (s *crashingSource) Receive(ctx context.Context) (worker.Message, error) {
	for {
		msg, err := s.inner.Receive(ctx)
		if err != nil {
			return nil, err
		}
		e := s.w.entryByAttempt(msg.Delivery().AttemptID)
		if e == nil || e.sc.name != scWorkerCrash || !e.crash.CompareAndSwap(0, 1) {
			return msg, nil
		}
		if !s.w.dieWith(ctx, e, msg) {
			return msg, nil
		}
	}
}

// dieWith is the doomed worker: it reports whether it consumed msg.
func (w *workload) dieWith(ctx context.Context, e *entry, msg worker.Message) bool {
	d := msg.Delivery()
	var lease *repo.Lease
	err := w.lat.time(latCall+"AcquireLease (doomed worker)", func() (err error) {
		_, lease, err = w.repo.AcquireLease(ctx, w.pool, &repo.AcquireLeaseParams{Delivery: d, WorkerID: demoDoomedWorkerID, LeaseDuration: demoLease})
		return err
	})
	var te *repo.TransitionError
	if errors.Is(err, repo.ErrDeliveryPending) || (errors.As(err, &te) && te.From == kfstype.RunStateQueued) {
		// Delivered before the relay's MarkDispatched committed (a queued
		// refusal is the same race, explained after the commit).
		e.crash.Store(0)
		_ = msg.Retry(ctx, time.Now().Add(50*time.Millisecond))
		return true
	}
	if err != nil {
		w.log.Warn("doomed worker could not take its delivery; a real worker gets it", "attempt_id", d.AttemptID, "queue_job_id", d.QueueJobID, "err", err)
		e.crash.Store(0)
		return false // let a real worker judge it
	}
	for _, cp := range []kfstype.Checkpoint{kfstype.CheckpointParsed, kfstype.CheckpointOutlineBuilt} {
		if _, err := w.repo.Advance(ctx, w.pool, &repo.AdvanceParams{Lease: lease, Checkpoint: cp}); err != nil {
			w.violate(checkDoomedWorker, "attempt %d: doomed worker could not advance: %v", e.idx, err)
			break
		}
	}
	_ = msg.Ack(ctx)
	e.crash.Store(2)
	w.log.Info("doomed worker died holding a lease", "attempt_id", d.AttemptID, "lease_expires_at", lease.ExpiresAt)
	return true
}

// outage takes the broker down for demoOutage once 40% of the attempts
// were started.
func (w *workload) outage(ctx context.Context) {
	defer close(w.outageDone)
	want := int32(len(w.entries) * 2 / 5)
	for w.started.Load() < want {
		if sleepCtx(ctx, 20*time.Millisecond) != nil {
			return
		}
	}
	w.queue.SetOutage(true)
	w.outageOn.Store(true)
	fmt.Fprintf(w.out, "[%s] ** broker outage begins (every publish fails for %s)\n", w.elapsed(), demoOutage)
	_ = sleepCtx(ctx, demoOutage)
	w.queue.SetOutage(false)
	w.outageOn.Store(false)
	fmt.Fprintf(w.out, "[%s] ** broker outage ends\n", w.elapsed())
}

// stateCounts counts the demo database's attempts per run state.
func (w *workload) stateCounts(ctx context.Context) (map[kfstype.RunState]int, error) {
	rows, err := w.pool.Query(ctx, `SELECT run_state, count(*) FROM document_compilation_attempts GROUP BY run_state`)
	if err != nil {
		return nil, err
	}
	out := map[kfstype.RunState]int{}
	for rows.Next() {
		var s string
		var n int
		if err := rows.Scan(&s, &n); err != nil {
			return nil, err
		}
		out[kfstype.RunState(s)] = n
	}
	return out, rows.Err()
}

func (w *workload) progressLine(counts map[kfstype.RunState]int) string {
	var live, done []string
	for _, s := range kfstype.RunStates() {
		part := fmt.Sprintf("%s %d", s, counts[s])
		if s.Live() {
			live = append(live, part)
		} else {
			done = append(done, part)
		}
	}
	line := fmt.Sprintf("[%s] started %d/%d | %s | %s | queue %d",
		w.elapsed(), w.started.Load(), len(w.entries), strings.Join(live, "  "), strings.Join(done, "  "), w.queue.Len())
	if w.outageOn.Load() {
		line += " | OUTAGE"
	}
	return line
}

// run drives the workload until every attempt is terminal and every
// control-plane action is done, or until deadline.
func (w *workload) run(ctx context.Context, deadline time.Duration) (retErr error) {
	if err := w.setup(ctx); err != nil {
		return err
	}
	rctx, stopRuntime := context.WithCancel(ctx)
	var runtimeWG sync.WaitGroup
	stopped := false
	stop := func() {
		if !stopped {
			stopped = true
			stopRuntime()
			runtimeWG.Wait()
		}
	}
	defer stop()

	rl, err := relay.New(w.pool, &demoPublisher{w: w, inner: w.queue}, &relay.Config{
		ID: "demo-relay", Logger: w.log, Metrics: w.metrics, Repo: w.repo,
		PollInterval: demoPollInterval, BackoffBase: demoDispatchBase, BackoffCap: demoDispatchCap,
		MaxDispatchAttempts: demoMaxDispatch, VisibilityTimeout: demoVisibility,
		LockDuration: demoLockDuration, PublishTimeout: demoPublishTimeout,
	})
	if err != nil {
		return err
	}
	runtimeWG.Go(func() { _ = rl.Run(rctx) })
	src := &crashingSource{w: w, inner: w.queue}
	for i := range demoWorkers {
		wk, err := worker.New(w.pool, src, w, &worker.Config{
			ID: fmt.Sprintf("demo-worker-%d", i+1), Concurrency: demoWorkerConcurrency, LeaseDuration: demoLease,
			RetryBackoffBase: demoRetryBase, RetryBackoffCap: demoRetryCap, Logger: w.log, Metrics: w.metrics, Repo: w.repo,
		})
		if err != nil {
			return err
		}
		runtimeWG.Go(func() { _ = wk.Run(rctx) })
	}

	w.t0 = time.Now()
	errs := make(chan error, len(w.entries)*2)
	var producers, controls sync.WaitGroup
	pace := min(demoStartSpread/time.Duration(max(1, len(w.entries)/demoProducers)), 50*time.Millisecond)
	for p := range demoProducers {
		producers.Go(func() {
			for i := p; i < len(w.entries); i += demoProducers {
				if rctx.Err() != nil {
					return
				}
				e := w.entries[i]
				if err := w.start(rctx, e); err != nil {
					errs <- err
					return
				}
				controls.Go(func() {
					if err := w.control(rctx, e); err != nil && rctx.Err() == nil {
						errs <- fmt.Errorf("control plane, attempt %d (%s): %w", e.idx, e.sc.name, err)
					}
				})
				_ = sleepCtx(rctx, pace)
			}
		})
	}
	runtimeWG.Go(func() { w.outage(rctx) })
	allIssued := make(chan struct{})
	go func() { producers.Wait(); controls.Wait(); close(allIssued) }()
	defer func() {
		// Producers and control-plane calls end with rctx.
		stopRuntime()
		<-allIssued
	}()
	issuedCh := allIssued

	timeout := time.After(deadline)
	tick := time.NewTicker(demoSettlePoll)
	defer tick.Stop()
	lastPrint := time.Now()
	issued := false
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case err := <-errs:
			return err
		case <-timeout:
			counts, _ := w.stateCounts(ctx)
			return fmt.Errorf("workload did not settle within %s: %s", deadline, w.progressLine(counts))
		case <-issuedCh:
			issued = true
			issuedCh = nil
			continue
		case <-tick.C:
		}
		counts, err := w.stateCounts(ctx)
		if err != nil {
			return fmt.Errorf("count attempts: %w", err)
		}
		settled := issued && int(w.started.Load()) == len(w.entries)
		total := 0
		for s, n := range counts {
			total += n
			if s.Live() && n > 0 {
				settled = false
			}
		}
		settled = settled && total == len(w.entries)
		if settled || time.Since(lastPrint) >= demoProgressEvery {
			fmt.Fprintln(w.out, w.progressLine(counts))
			lastPrint = time.Now()
		}
		if settled {
			break
		}
	}
	elapsed := time.Since(w.t0)
	stop()
	<-w.outageDone
	fmt.Fprintf(w.out, "== settled: %d attempts terminal after %s; relay and workers stopped\n", len(w.entries), elapsed.Round(10*time.Millisecond))
	return nil
}

// Names of the end-of-run checks.
const (
	checkAllTerminal   = "every started attempt is in the database, terminal, with no live slot"
	checkOutcomes      = "every attempt ended in its scenario's state and error code (and execution count)"
	checkOutboxPairing = "every attempt has exactly one outbox row, in the status its run state requires"
	checkOutboxIdle    = "no outbox row is left dispatching or leased"
	checkNoRunning     = "no attempt is left running"
	checkLeaseHeld     = "handlers only ran on attempts running under their own unexpired lease"
	checkNoOverlap     = "no two handler executions of one attempt overlapped"
	checkCandidates    = "every succeeded attempt bound its own candidate publication"
	checkDoomedWorker  = "the doomed worker held its lease until it died"
	checkMetrics       = "runtime counters agree with the scenarios"
)

// outcome is one attempt as stored at the end.
type outcome struct {
	state      kfstype.RunState
	code       string
	exec       int32
	checkpoint kfstype.Checkpoint
	candidate  *uuid.UUID
	outboxes   int
	outbox     string
}

func (w *workload) readOutcomes(ctx context.Context) (map[uuid.UUID]*outcome, error) {
	rows, err := w.pool.Query(ctx, `
		SELECT a.id, a.run_state, coalesce(a.last_error_code, ''), a.execution_attempts, a.checkpoint,
		       a.candidate_publication_id,
		       (SELECT count(*) FROM document_compilation_outbox o WHERE o.attempt_id = a.id),
		       coalesce((SELECT string_agg(o.status, ',') FROM document_compilation_outbox o WHERE o.attempt_id = a.id), '')
		  FROM document_compilation_attempts a`)
	if err != nil {
		return nil, fmt.Errorf("read outcomes: %w", err)
	}
	out := map[uuid.UUID]*outcome{}
	for rows.Next() {
		var id uuid.UUID
		o := &outcome{}
		if err := rows.Scan(&id, &o.state, &o.code, &o.exec, &o.checkpoint, &o.candidate, &o.outboxes, &o.outbox); err != nil {
			return nil, fmt.Errorf("read outcomes: %w", err)
		}
		out[id] = o
	}
	return out, rows.Err()
}

// wantOutbox is the terminal outbox status of each terminal run state.
var wantOutbox = map[kfstype.RunState]kfstype.OutboxStatus{
	kfstype.RunStateSucceeded:  kfstype.OutboxStatusCompleted,
	kfstype.RunStateFailed:     kfstype.OutboxStatusDead,
	kfstype.RunStateCanceled:   kfstype.OutboxStatusCanceled,
	kfstype.RunStateSuperseded: kfstype.OutboxStatusCanceled,
}

// report prints the outcome table, counters, queue stats and latencies,
// runs the end-of-run checks and returns how many failed.
func (w *workload) report(ctx context.Context) (int, error) {
	outcomes, err := w.readOutcomes(ctx)
	if err != nil {
		return 0, err
	}
	var idle, live, running int
	if err := w.pool.QueryRow(ctx, `SELECT
		(SELECT count(*) FROM document_compilation_outbox WHERE status IN ('dispatching', 'leased')),
		(SELECT count(*) FROM document_compilation_attempts WHERE active_slot IS NOT NULL),
		(SELECT count(*) FROM document_compilation_attempts WHERE run_state = 'running')`).Scan(&idle, &live, &running); err != nil {
		return 0, fmt.Errorf("read leftovers: %w", err)
	}
	if idle > 0 {
		w.violate(checkOutboxIdle, "%d outbox rows dispatching or leased", idle)
	}
	if running > 0 {
		w.violate(checkNoRunning, "%d attempts running", running)
	}
	if live > 0 {
		w.violate(checkAllTerminal, "%d attempts still hold a live slot", live)
	}
	if len(outcomes) != len(w.entries) {
		w.violate(checkAllTerminal, "%d attempts in the database, %d started", len(outcomes), len(w.entries))
	}

	type agg struct {
		n                int
		states, codes    map[string]int
		minExec, maxExec int32
		ok               bool
	}
	aggs := map[string]*agg{}
	for _, sc := range scenarios {
		aggs[sc.name] = &agg{states: map[string]int{}, codes: map[string]int{}, minExec: 1 << 30, maxExec: -1, ok: true}
	}
	for _, e := range w.entries {
		a := aggs[e.sc.name]
		a.n++
		o := outcomes[e.attempt()]
		if o == nil {
			a.ok = false
			a.states["missing"]++
			w.violate(checkAllTerminal, "attempt %d (%s) %s not found", e.idx, e.sc.name, e.attempt())
			continue
		}
		a.states[string(o.state)]++
		if o.code != "" {
			a.codes[o.code]++
		}
		a.minExec, a.maxExec = min(a.minExec, o.exec), max(a.maxExec, o.exec)
		if !o.state.Terminal() {
			w.violate(checkAllTerminal, "attempt %d (%s) is %s", e.idx, e.sc.name, o.state)
		}
		bad := o.state != e.sc.wantState || (e.sc.wantCode != "" && o.code != e.sc.wantCode) ||
			(e.sc.checkExec && (o.exec < e.sc.minExec || o.exec > e.sc.maxExec))
		if bad {
			a.ok = false
			w.violate(checkOutcomes, "attempt %d (%s): %s/%s after %d executions, want %s/%s",
				e.idx, e.sc.name, o.state, orDash(o.code), o.exec, e.sc.wantState, orDash(e.sc.wantCode))
		}
		if want, ok := wantOutbox[o.state]; !ok || o.outboxes != 1 || o.outbox != string(want) {
			w.violate(checkOutboxPairing, "attempt %d (%s): %s with %d outbox rows (%s)", e.idx, e.sc.name, o.state, o.outboxes, o.outbox)
		}
		if o.state == kfstype.RunStateSucceeded && (o.candidate == nil || *o.candidate != e.pubID || o.checkpoint != kfstype.CheckpointPublished) {
			w.violate(checkCandidates, "attempt %d (%s): checkpoint %s, candidate %v", e.idx, e.sc.name, o.checkpoint, o.candidate)
		}
		if e.sc.name == scWorkerCrash && e.crash.Load() != 2 {
			w.violate(checkDoomedWorker, "attempt %d: the doomed worker never got it", e.idx)
		}
	}

	out := w.out
	fmt.Fprintln(out, "\nOUTCOMES (expected vs actual terminal state per scenario)")
	tw := newTable(out)
	fmt.Fprintln(tw, "SCENARIO\tN\tEXPECTED\tACTUAL\tERROR CODES\tEXEC\tRESULT\t")
	for _, sc := range scenarios {
		a := aggs[sc.name]
		want := string(sc.wantState)
		if sc.wantCode != "" {
			want += "/" + sc.wantCode
		}
		exec := "-"
		if a.maxExec >= 0 {
			exec = fmt.Sprintf("%d", a.minExec)
			if a.maxExec != a.minExec {
				exec += fmt.Sprintf("-%d", a.maxExec)
			}
		}
		fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%s\t%s\t%s\t\n", sc.name, a.n, want, formatCounts(a.states), formatCounts(a.codes), exec, passFail(a.ok))
	}
	_ = tw.Flush()
	fmt.Fprintln(out, "\nSCENARIOS")
	for _, sc := range scenarios {
		fmt.Fprintf(out, "  %-22s %s\n", sc.name, sc.what)
	}

	// Counters: the runtime's own view must match the scenarios.
	count := func(name string) int64 { return int64(aggs[name].n) }
	m := w.metrics
	for _, c := range []struct {
		counter observe.Counter
		want    int64
	}{
		{observe.Panicked, count(scPanic)},
		{observe.DeadLettered, count(scDeadLetter) + count(scDeadLetterRetry)},
		{observe.Exhausted, count(scExhausted)},
	} {
		if got := m.Get(c.counter); got != c.want {
			w.violate(checkMetrics, "%s = %d, want %d", c.counter, got, c.want)
		}
	}
	if got, want := m.Get(observe.Completed), count(scSuccess)+count(scRetryOnce)+count(scWorkerCrash)+count(scDeferredRelease)+count(scManualRetry)+count(scDeadLetterRetry); got != want {
		w.violate(checkMetrics, "%s = %d, want %d", observe.Completed, got, want)
	}
	fmt.Fprintln(out, "\nRUNTIME COUNTERS (observe.Counts)")
	tw = newTable(out)
	for _, c := range m.Snapshot() {
		fmt.Fprintf(tw, "%s\t%d\t\n", c.Counter, c.N)
	}
	_ = tw.Flush()
	pub, acked, retried := w.queue.Stats()
	fmt.Fprintf(out, "\nMEMQUEUE: published %d, acked %d, handed back %d, still queued %d (stale redeliveries, dropped at shutdown)\n",
		pub, acked, retried, w.queue.Len())
	var handlerRuns int32
	for _, e := range w.entries {
		handlerRuns += e.executions.Load()
	}
	fmt.Fprintf(out, "HANDLER: %d executions, %d lease checks at handler start\n", handlerRuns, w.leaseChecks.Load())

	printLatencies(out, "STATEMENT LATENCY (pgx QueryTracer on the pool: relay, workers, demo)", w.lat.rows(latStatement))
	printLatencies(out, "REPO CALL LATENCY (calls the demo makes itself, including any explaining read)", w.lat.rows(latCall))

	fmt.Fprintln(out, "\nCHECKS")
	failed := 0
	w.violationsMu.Lock()
	defer w.violationsMu.Unlock()
	for _, check := range []string{checkAllTerminal, checkOutcomes, checkOutboxPairing, checkOutboxIdle, checkNoRunning,
		checkLeaseHeld, checkNoOverlap, checkCandidates, checkDoomedWorker, checkMetrics} {
		v := w.violations[check]
		fmt.Fprintf(out, "%s  %s\n", passFail(len(v) == 0), check)
		if len(v) > 0 {
			failed++
			for i, s := range v {
				if i == 5 {
					fmt.Fprintf(out, "        … and %d more\n", len(v)-5)
					break
				}
				fmt.Fprintf(out, "        %s\n", s)
			}
		}
	}
	return failed, nil
}

func newTable(out io.Writer) *tabwriter.Writer { return tabwriter.NewWriter(out, 0, 4, 2, ' ', 0) }

func passFail(ok bool) string {
	if ok {
		return "PASS"
	}
	return "FAIL"
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// formatCounts prints a count map as "a=1 b=2", sorted; "-" when empty.
func formatCounts(m map[string]int) string {
	if len(m) == 0 {
		return "-"
	}
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("%s=%d", k, m[k])
	}
	return strings.Join(parts, " ")
}
