package prom

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/knowledgefs/kfsdb/repo"
)

// Collector defaults: a zero CollectorOptions field means them.
const (
	// SampleIntervalDefault is CollectorOptions.SampleInterval's default.
	SampleIntervalDefault = 15 * time.Second
	// SampleTimeoutDefault is CollectorOptions.SampleTimeout's default.
	SampleTimeoutDefault = 5 * time.Second
)

// CollectorOptions tunes NewCollector.
type CollectorOptions struct {
	// Cap is where each count stops (1..repo.MaxCountCap): a sample reads
	// at most about Cap index entries per state, whatever the history.
	// Defaults to repo.CountCapDefault.
	Cap int32
	// Namespace prefixes every metric name. Defaults to NamespaceDefault.
	Namespace string
	// Repo runs the reads. Defaults to repo.New(nil).
	Repo *repo.Repo
	// SampleInterval is how long a sample serves scrapes before the next
	// scrape reads the database again. Defaults to SampleIntervalDefault.
	SampleInterval time.Duration
	// SampleTimeout bounds one sample's reads. Defaults to
	// SampleTimeoutDefault.
	SampleTimeout time.Duration
	// TenantID confines the collector to one tenant (a confined console's
	// metrics): kfsdb_attempts counts only its attempts, and the outbox
	// series are left out, since the outbox has no tenant column and its
	// backlog is every tenant's. Defaults to "": every tenant.
	TenantID string
}

// Collector is a prometheus.Collector of the backlog gauges, read with
// repo.CountAttempts (every tenant, capped) and repo.OutboxBacklog:
//
//	kfsdb_attempts{state}                  attempts per run state
//	kfsdb_attempts_capped{state}           1 when that count hit the cap (a lower bound)
//	kfsdb_outbox_due{status}               due outbox rows per status
//	kfsdb_outbox_due_capped{status}        1 when that count hit the cap
//	kfsdb_outbox_oldest_due_age_seconds    how long the oldest due row has waited
//	kfsdb_backlog_sample_errors_total      samples that failed
//	kfsdb_backlog_sampled_timestamp_seconds when the served sample was read
//	kfsdb_tenants_limited{limit}           tenants capped, rate-limited, paused
//
// kfsdb_tenants_limited counts the tenants with each limit of direct
// delivery (repo.CountTenantLimits: limit="cap", "rate", "pause"). It is
// left out of a confined collector (every tenant's), and of a sample whose
// role may not read the limits (a console role from before migration
// 0011's grants: the other series stand).
//
// A scrape reads the database only when the last sample is older than
// SampleInterval, under SampleTimeout; concurrent scrapes share one read.
// When a read fails the collector serves the previous sample (its
// timestamp tells its age) and counts the error, so a database outage
// does not fail the whole scrape. Safe for concurrent use.
type Collector struct {
	db   repo.DBTX
	opts CollectorOptions
	now  func() time.Time

	attempts, attemptsCapped, due, dueCapped, oldestAge, sampledAt, errorsDesc, tenantsLimited *prometheus.Desc

	mu      sync.Mutex
	sample  *backlogSample
	errors  float64
	sampled time.Time // when sample was read, by now()
}

type backlogSample struct {
	attempts []repo.StateCount
	backlog  *repo.Backlog
	// limits is nil when not read (confined) or not readable.
	limits *repo.TenantLimitCounts
}

// NewCollector returns a Collector reading through db (a pool: each
// sample runs two statements). opts may be nil; register the collector
// on a prometheus.Registerer.
//
// Errors: db is nil, or an option is out of range.
func NewCollector(db repo.DBTX, opts *CollectorOptions) (*Collector, error) {
	if db == nil {
		return nil, fmt.Errorf("prom.NewCollector: db is nil")
	}
	var o CollectorOptions
	if opts != nil {
		o = *opts
	}
	switch {
	case o.Cap < 0 || o.Cap > repo.MaxCountCap:
		return nil, fmt.Errorf("prom.NewCollector: Cap must be between 1 and %d (or 0 for the default), got %d", repo.MaxCountCap, o.Cap)
	case o.SampleInterval < 0:
		return nil, fmt.Errorf("prom.NewCollector: SampleInterval must not be negative, got %s", o.SampleInterval)
	case o.SampleTimeout < 0:
		return nil, fmt.Errorf("prom.NewCollector: SampleTimeout must not be negative, got %s", o.SampleTimeout)
	case len(o.TenantID) > repo.MaxTenantIDLength:
		return nil, fmt.Errorf("prom.NewCollector: TenantID must be at most %d characters", repo.MaxTenantIDLength)
	}
	o.Cap = cmp.Or(o.Cap, repo.CountCapDefault)
	o.Namespace = namespace(&Options{Namespace: o.Namespace})
	o.SampleInterval = cmp.Or(o.SampleInterval, SampleIntervalDefault)
	o.SampleTimeout = cmp.Or(o.SampleTimeout, SampleTimeoutDefault)
	if o.Repo == nil {
		o.Repo = repo.New(nil)
	}
	name := func(n string) string { return prometheus.BuildFQName(o.Namespace, "", n) }
	return &Collector{
		db: db, opts: o, now: time.Now,
		attempts:       prometheus.NewDesc(name("attempts"), "Attempts per run state (every tenant, or the confined one), counted up to the cap.", []string{"state"}, nil),
		attemptsCapped: prometheus.NewDesc(name("attempts_capped"), "1 when kfsdb_attempts of that state reached the cap and is a lower bound.", []string{"state"}, nil),
		due:            prometheus.NewDesc(name("outbox_due"), "Outbox rows due now per status (what a relay or direct worker would take), counted up to the cap.", []string{"status"}, nil),
		dueCapped:      prometheus.NewDesc(name("outbox_due_capped"), "1 when kfsdb_outbox_due of that status reached the cap and is a lower bound.", []string{"status"}, nil),
		oldestAge:      prometheus.NewDesc(name("outbox_oldest_due_age_seconds"), "How long the longest-waiting due outbox row has been due; 0 when none is.", nil, nil),
		sampledAt:      prometheus.NewDesc(name("backlog_sampled_timestamp_seconds"), "Unix time the served backlog sample was read.", nil, nil),
		errorsDesc:     prometheus.NewDesc(name("backlog_sample_errors_total"), "Backlog samples that failed; the previous sample is served.", nil, nil),
		tenantsLimited: prometheus.NewDesc(name("tenants_limited"), "Tenants with a limit of direct delivery: cap (running attempts), rate (leases per second), pause.", []string{"limit"}, nil),
	}, nil
}

// Describe implements prometheus.Collector.
func (c *Collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.attempts, c.attemptsCapped, c.due, c.dueCapped, c.oldestAge, c.sampledAt, c.errorsDesc, c.tenantsLimited} {
		ch <- d
	}
}

// Collect implements prometheus.Collector.
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	c.mu.Lock()
	if c.sample == nil || c.now().Sub(c.sampled) >= c.opts.SampleInterval {
		if s, err := c.read(); err != nil {
			c.errors++
		} else {
			c.sample, c.sampled = s, c.now()
		}
	}
	s, sampled, errs := c.sample, c.sampled, c.errors
	c.mu.Unlock()

	ch <- prometheus.MustNewConstMetric(c.errorsDesc, prometheus.CounterValue, errs)
	if s == nil {
		return
	}
	ch <- prometheus.MustNewConstMetric(c.sampledAt, prometheus.GaugeValue, float64(sampled.UnixNano())/1e9)
	for _, a := range s.attempts {
		ch <- prometheus.MustNewConstMetric(c.attempts, prometheus.GaugeValue, float64(a.N), string(a.State))
		ch <- prometheus.MustNewConstMetric(c.attemptsCapped, prometheus.GaugeValue, bool01(a.AtLeast), string(a.State))
	}
	if s.backlog == nil {
		return // confined to a tenant
	}
	for _, d := range s.backlog.Due {
		ch <- prometheus.MustNewConstMetric(c.due, prometheus.GaugeValue, float64(d.N), string(d.Status))
		ch <- prometheus.MustNewConstMetric(c.dueCapped, prometheus.GaugeValue, bool01(d.AtLeast), string(d.Status))
	}
	ch <- prometheus.MustNewConstMetric(c.oldestAge, prometheus.GaugeValue, s.backlog.OldestDueAge.Seconds())
	if l := s.limits; l != nil {
		ch <- prometheus.MustNewConstMetric(c.tenantsLimited, prometheus.GaugeValue, float64(l.Capped), "cap")
		ch <- prometheus.MustNewConstMetric(c.tenantsLimited, prometheus.GaugeValue, float64(l.RateLimited), "rate")
		ch <- prometheus.MustNewConstMetric(c.tenantsLimited, prometheus.GaugeValue, float64(l.Paused), "pause")
	}
}

// read takes one sample under SampleTimeout.
func (c *Collector) read() (*backlogSample, error) {
	ctx, cancel := context.WithTimeout(context.Background(), c.opts.SampleTimeout)
	defer cancel()
	all := c.opts.TenantID == ""
	attempts, err := c.opts.Repo.CountAttempts(ctx, c.db, &repo.CountAttemptsParams{TenantID: c.opts.TenantID, AllTenants: all, Cap: c.opts.Cap})
	if err != nil {
		return nil, err
	}
	if !all {
		return &backlogSample{attempts: attempts}, nil
	}
	backlog, err := c.opts.Repo.OutboxBacklog(ctx, c.db, &repo.OutboxBacklogParams{Cap: c.opts.Cap})
	if err != nil {
		return nil, err
	}
	limits, err := c.opts.Repo.CountTenantLimits(ctx, c.db, &repo.CountTenantLimitsParams{})
	var pgErr *pgconn.PgError
	switch {
	case errors.As(err, &pgErr) && pgErr.Code == "42501": // insufficient_privilege: left out
	case err != nil:
		return nil, err
	}
	return &backlogSample{attempts: attempts, backlog: backlog, limits: limits}, nil
}

func bool01(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
