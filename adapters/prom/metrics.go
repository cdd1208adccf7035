// Package prom exports kfsdb to Prometheus: the runtime's counts (an
// observe.Metrics), statement latencies by sqlc query name (a pgx
// QueryTracer) and the backlog gauges of the operator reads (a
// prometheus.Collector sampled on bounded queries).
//
// It is a module of its own, so importers of kfsdb's repo, relay and
// worker never get client_golang. Wiring:
//
//	reg := prometheus.NewRegistry()
//	m, _ := prom.New(reg, nil)           // relay/worker/pgsource Config.Metrics
//	tr, _ := prom.NewTracer(reg, nil)    // pgxpool.Config.ConnConfig.Tracer
//	c, _ := prom.NewCollector(pool, nil) // reg.MustRegister(c)
package prom

import (
	"fmt"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/knowledgefs/kfsdb/observe"
)

// NamespaceDefault is the metric name prefix when Options.Namespace (or
// another options struct's Namespace) is empty.
const NamespaceDefault = "kfsdb"

// Options tunes New.
type Options struct {
	// Namespace prefixes every metric name. Defaults to NamespaceDefault.
	Namespace string
}

// Metrics is an observe.Metrics that adds each count to a Prometheus
// counter named after it: observe.Completed ("worker_completed") becomes
// kfsdb_worker_completed_total. It is also an observe.Durations, so the
// worker reports durations to a histogram named after each: observe.
// StartToSucceeded becomes kfsdb_attempt_start_to_succeeded_seconds.
// Neither carries labels. Safe for concurrent use; Add and Observe are a
// map read and atomic adds.
type Metrics struct {
	counters   map[observe.Counter]prometheus.Counter
	histograms map[observe.Histogram]prometheus.Histogram
}

var (
	_ observe.Metrics   = (*Metrics)(nil)
	_ observe.Durations = (*Metrics)(nil)
)

// New registers one counter per observe.Counters() entry and one
// histogram per observe.Histograms() entry on reg, and returns the Metrics
// that feeds them. opts may be nil.
//
// Errors: reg is nil, or registration fails (a name already registered).
func New(reg prometheus.Registerer, opts *Options) (*Metrics, error) {
	if reg == nil {
		return nil, fmt.Errorf("prom.New: reg is nil")
	}
	ns := namespace(opts)
	m := &Metrics{counters: make(map[observe.Counter]prometheus.Counter), histograms: make(map[observe.Histogram]prometheus.Histogram)}
	for _, c := range observe.Counters() {
		pc := prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: ns,
			Name:      string(c) + "_total",
			Help:      counterHelp(c),
		})
		if err := reg.Register(pc); err != nil {
			return nil, fmt.Errorf("prom.New: register counter %s: %w", c, err)
		}
		m.counters[c] = pc
	}
	for _, h := range observe.Histograms() {
		ph := prometheus.NewHistogram(prometheus.HistogramOpts{
			Namespace: ns,
			Name:      string(h) + "_seconds",
			Help:      histogramHelps[h],
			// 10 ms to an hour: a queued attempt may wait long.
			Buckets: prometheus.ExponentialBucketsRange(0.01, 3600, 20),
		})
		if err := reg.Register(ph); err != nil {
			return nil, fmt.Errorf("prom.New: register histogram %s: %w", h, err)
		}
		m.histograms[h] = ph
	}
	return m, nil
}

// Add implements observe.Metrics. A count of an unknown Counter, and a
// count n <= 0, is dropped: Prometheus counters only go up.
func (m *Metrics) Add(c observe.Counter, n int64) {
	if n <= 0 {
		return
	}
	if pc, ok := m.counters[c]; ok {
		pc.Add(float64(n))
	}
}

// Observe implements observe.Durations. A duration of an unknown
// Histogram is dropped.
func (m *Metrics) Observe(h observe.Histogram, d time.Duration) {
	if ph, ok := m.histograms[h]; ok {
		ph.Observe(d.Seconds())
	}
}

func namespace(opts *Options) string {
	if opts == nil || opts.Namespace == "" {
		return NamespaceDefault
	}
	return opts.Namespace
}

// helps documents each counter; a Counter missing here gets a generic
// help (TestNewRegistersEveryCounter requires none is missing).
var helps = map[observe.Counter]string{
	observe.Claimed:           "Outbox rows the relay claimed for publishing.",
	observe.Published:         "Outbox rows the relay published and marked dispatched.",
	observe.PublishFailed:     "Relay publish calls that failed; the rows stay for a retry.",
	observe.DeadLettered:      "Outbox rows the relay dead-lettered after exhausting dispatch attempts.",
	observe.MarkRefused:       "Published rows whose MarkDispatched guard refused them (claim lost).",
	observe.LeasesAcquired:    "Attempt leases the worker acquired.",
	observe.LeasesLost:        "Attempt leases the worker lost (heartbeat or completion refused).",
	observe.Completed:         "Attempts the worker completed as succeeded.",
	observe.Failed:            "Attempts the worker failed terminally.",
	observe.Retried:           "Attempts the worker scheduled for a retry.",
	observe.Exhausted:         "Attempts failed because their execution attempts were exhausted.",
	observe.Panicked:          "Handler calls that panicked.",
	observe.StaleDeliveries:   "Deliveries acknowledged without running: the attempt had ended or the delivery was malformed.",
	observe.DeferredDelivery:  "Deliveries handed back for later: not yet marked dispatched, or leased by another worker.",
	observe.PendingWaits:      "In-slot waits for a delivery that arrived before its MarkDispatched committed.",
	observe.HandlersAbandoned: "Handlers a stopping worker abandoned after its cancel grace; their attempts were handed back.",
	observe.EventsDropped:     "Outcome events dropped because the worker's Events channel was full.",
	observe.Fetches:           "FetchLeases calls of the PostgreSQL source (direct delivery).",
	observe.FetchedLeases:     "Leases the PostgreSQL source fetched.",
	observe.FetchExhausted:    "Attempts FetchLeases failed as exhausted instead of leasing.",
	observe.FetchFailed:       "FetchLeases calls that failed.",
	observe.LeasesHandedBack:  "Fetched leases handed back because their slot stopped first.",
	observe.SourceWokenNamed:  "Fetches of the PostgreSQL source after a notification that named it: a commit made a row due.",
	observe.SourceWokenAll:    "Fetches of the PostgreSQL source after a notification that named nobody and woke every listener.",
	observe.SourceIdlePolls:   "Fetches of the PostgreSQL source after an idle sleep of the whole poll interval: its idle cost.",
	observe.SourceShortWaits:  "Fetches of the PostgreSQL source after a shorter sleep ran out: a next due time, a due row still due, a failed fetch's backoff.",
	observe.SourceRechecks:    "Fetches of the PostgreSQL source that look once more after a new idle registration found a row due.",
}

var histogramHelps = map[observe.Histogram]string{
	observe.StartToSucceeded: "Seconds from an attempt's Start to its completion as succeeded, by the database's clock.",
}

func counterHelp(c observe.Counter) string {
	if h, ok := helps[c]; ok {
		return h
	}
	return "kfsdb count " + strings.ReplaceAll(string(c), "_", " ") + "."
}
