package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/knowledgefs/kfsdb/bench/kfsdb-bench/delivery"
	"github.com/knowledgefs/kfsdb/memqueue"
	"github.com/knowledgefs/kfsdb/observe"
	"github.com/knowledgefs/kfsdb/repo"
)

// Timings of the demo runtime: short, so a few hundred attempts with
// retries, lease expiries and an outage finish in seconds. The relay's
// (poll, dispatch, visibility, claim lock, publish) and the outage apply
// to relay delivery only; the sources poll every demoPollInterval too.
const (
	demoWorkers           = 4
	demoWorkerConcurrency = 4
	demoProducers         = 4
	// demoLease is well above the statement latencies of a loaded machine
	// (p99 of 5 s seen at load average 37 on 2 cores): with 2 s, leases
	// lapsed before heartbeats got through, handlers of one attempt
	// overlapped and the demo's checks failed. Heartbeat every third.
	demoLease        = 8 * time.Second
	demoRetryBase    = 100 * time.Millisecond
	demoRetryCap     = time.Second
	demoPollInterval = 200 * time.Millisecond
	demoDispatchBase = 100 * time.Millisecond
	demoDispatchCap  = time.Second
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
	demoDoomedWorkerID  = "demo-doomed-worker"
	demoPoolMaxConns    = 32
	demoSettlePoll      = 100 * time.Millisecond
	demoProgressEvery   = time.Second
	demoHandlerMaxBlock = 10 * time.Second
)

var demoTenants = []string{"tenant-acme", "tenant-globex", "tenant-initech"}

const demoSpacesPerTenant = 3

// workload runs the demo's attempts through real workers, fed by a real
// relay over an in-process queue or leasing straight from the outbox, and
// checks the outcome.
type workload struct {
	out     io.Writer
	log     *slog.Logger
	pool    *pgxpool.Pool
	repo    *repo.Repo
	lat     *latencies
	metrics *observe.Counts
	mode    delivery.Mode
	// queue is the relay's broker; nil under postgres delivery.
	queue *memqueue.Queue
	// scenarios are those the mode runs, in table order; skipped names the
	// relay-only ones it leaves out.
	scenarios []*scenario
	skipped   []string
	entries   []*entry
	byAsset   map[uuid.UUID]*entry // read-only once built
	// byAttempt maps attempt ids to entries (uuid.UUID → *entry).
	byAttempt sync.Map

	started    atomic.Int32
	outageOn   atomic.Bool
	outageDone chan struct{}
	// deaths counts the leases the doomed worker abandoned.
	deaths atomic.Int32

	violationsMu sync.Mutex
	violations   map[string][]string // check → examples
	leaseChecks  atomic.Int64
	t0           time.Time
}

func newWorkload(out io.Writer, log *slog.Logger, pool *pgxpool.Pool, lat *latencies, mode delivery.Mode, n int, seed uint64) *workload {
	w := &workload{
		out: out, log: log, pool: pool, repo: repo.New(nil), lat: lat, metrics: &observe.Counts{},
		mode: mode, byAsset: make(map[uuid.UUID]*entry, n),
		outageDone: make(chan struct{}), violations: make(map[string][]string),
	}
	if mode == delivery.Relay {
		w.queue = memqueue.New()
	}
	w.scenarios, w.skipped = scenariosFor(mode)
	spaces := make(map[string][]uuid.UUID)
	for _, t := range demoTenants {
		for range demoSpacesPerTenant {
			spaces[t] = append(spaces[t], uuid.New())
		}
	}
	for i, sc := range planScenarios(w.scenarios, n, seed) {
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

func (w *workload) register(e *entry, id uuid.UUID) {
	e.attemptID.Store(&id)
	w.byAttempt.Store(id, e)
}

func (w *workload) ref(e *entry) repo.AttemptRef {
	return repo.AttemptRef{TenantID: e.tenantID, KnowledgeSpaceID: e.spaceID, AttemptID: e.attempt()}
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
