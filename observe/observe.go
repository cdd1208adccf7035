// Package observe is the small metrics seam of kfsdb's runtime: the relay
// and the worker count what they do through a Metrics the application
// wires to its own metrics system. There is no global state. The adapters
// to Prometheus and OpenTelemetry sit above the runtime in modules of
// their own (adapters/prom, adapters/otel), so this seam and its importers
// carry none of their libraries.
package observe

import (
	"sort"
	"sync"
	"time"
)

// Counter names a count the runtime reports.
type Counter string

// Counters the relay and worker report.
const (
	// Relay.
	Claimed       Counter = "relay_claimed"
	Published     Counter = "relay_published"
	PublishFailed Counter = "relay_publish_failed"
	DeadLettered  Counter = "relay_dead_lettered"
	MarkRefused   Counter = "relay_mark_refused"
	// Worker.
	LeasesAcquired   Counter = "worker_leases_acquired"
	LeasesLost       Counter = "worker_leases_lost"
	Completed        Counter = "worker_completed"
	Failed           Counter = "worker_failed"
	Retried          Counter = "worker_retried"
	Exhausted        Counter = "worker_exhausted"
	Panicked         Counter = "worker_panicked"
	StaleDeliveries  Counter = "worker_stale_deliveries"
	DeferredDelivery Counter = "worker_deliveries_deferred"
	// PendingWaits counts the in-slot waits for a delivery that arrived
	// before its relay's MarkDispatched committed.
	PendingWaits Counter = "worker_pending_delivery_waits"
	// HandlersAbandoned counts the handlers a stopping worker abandoned
	// (they had not returned within its CancelGrace); their attempts were
	// handed back.
	HandlersAbandoned Counter = "worker_handlers_abandoned"
	// EventsDropped counts the outcome events the worker's Events channel
	// had no room for.
	EventsDropped Counter = "worker_events_dropped"
	// PostgreSQL source (direct delivery).
	Fetches        Counter = "source_fetches"
	FetchedLeases  Counter = "source_fetched_leases"
	FetchExhausted Counter = "source_fetch_exhausted"
	FetchFailed    Counter = "source_fetch_failed"
	// LeasesHandedBack counts leases fetched for slots that stopped before
	// taking them, handed back as the source stopped.
	LeasesHandedBack Counter = "source_leases_handed_back"
	// Why an idle source fetched again, one count per fetch after an idle
	// sleep, so with Fetches these say what a fleet's fetches come from
	// (docs/AGEING.md, "Wake-ups with an idle fleet").
	//
	// SourceWokenNamed counts fetches after a notification that named the
	// source: a commit made a row due and woke this one idle listener
	// (migration 0010), or found every registration held and named this
	// one's (0013).
	SourceWokenNamed Counter = "source_woken_named"
	// SourceWokenAll counts fetches after a notification that named nobody
	// and woke every listener (a commit under REPEATABLE READ or
	// SERIALIZABLE, or one that found every idle registration held by
	// another transaction: always before migration 0013, more than eight
	// since), and after LISTEN (re)established.
	SourceWokenAll Counter = "source_woken_all"
	// SourceIdlePolls counts fetches after a sleep of a whole PollInterval
	// that nothing cut short: the idle cost, one per PollInterval per idle
	// source.
	SourceIdlePolls Counter = "source_idle_polls"
	// SourceShortWaits counts fetches after a shorter sleep ran out: until
	// the next row's due time, a failed fetch's backoff, or a retry wait
	// for a due row (fetched once reading the registration again still
	// found it due past the follow-up wait).
	SourceShortWaits Counter = "source_short_waits"
	// SourceRechecks counts the fetches that look once more after a new
	// idle registration (a commit that checked just before it woke nobody
	// for this source): only when reading the registration again found a
	// row due, or found it taken again.
	SourceRechecks Counter = "source_rechecks"
)

// Counters returns every Counter the relay, the worker and the PostgreSQL
// source report, in declaration order: what an adapter registers up front.
func Counters() []Counter {
	return []Counter{
		Claimed, Published, PublishFailed, DeadLettered, MarkRefused,
		LeasesAcquired, LeasesLost, Completed, Failed, Retried, Exhausted, Panicked,
		StaleDeliveries, DeferredDelivery, PendingWaits, HandlersAbandoned, EventsDropped,
		Fetches, FetchedLeases, FetchExhausted, FetchFailed, LeasesHandedBack,
		SourceWokenNamed, SourceWokenAll, SourceIdlePolls, SourceShortWaits, SourceRechecks,
	}
}

// Metrics receives counts. Implementations must be safe for concurrent use
// and fast: Add is called on hot paths.
type Metrics interface {
	Add(c Counter, n int64)
}

// Histogram names a duration the runtime reports.
type Histogram string

// Histograms the worker reports.
const (
	// StartToSucceeded is how long an attempt took from Start to its
	// completion as succeeded, both read off the database's clock:
	// queueing, dispatch, retries and handler runs included.
	StartToSucceeded Histogram = "attempt_start_to_succeeded"
)

// Histograms returns every Histogram the runtime reports, in declaration
// order: what an adapter registers up front.
func Histograms() []Histogram {
	return []Histogram{StartToSucceeded}
}

// Durations is an optional interface of a Metrics: when the Metrics given
// to the worker implements it, the worker reports durations through it
// too. Implementations must be safe for concurrent use and fast.
type Durations interface {
	Observe(h Histogram, d time.Duration)
}

// Discard is a Metrics that drops every count.
type Discard struct{}

// Add implements Metrics.
func (Discard) Add(Counter, int64) {}

// Counts is an in-memory Metrics, for tests, the demo and simple apps.
// The zero value is ready; safe for concurrent use. A nil *Counts counts
// nothing.
type Counts struct {
	mu sync.Mutex
	m  map[Counter]int64
}

// Add implements Metrics.
func (c *Counts) Add(name Counter, n int64) {
	if c == nil {
		return
	}
	c.mu.Lock()
	if c.m == nil {
		c.m = make(map[Counter]int64)
	}
	c.m[name] += n
	c.mu.Unlock()
}

// Get returns one count.
func (c *Counts) Get(name Counter) int64 {
	if c == nil {
		return 0
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.m[name]
}

// Snapshot returns every count, sorted by name.
func (c *Counts) Snapshot() []Count {
	if c == nil {
		return nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make([]Count, 0, len(c.m))
	for k, v := range c.m {
		out = append(out, Count{Counter: k, N: v})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Counter < out[j].Counter })
	return out
}

// Count is one entry of a Snapshot.
type Count struct {
	Counter Counter
	N       int64
}
