// Package pgsource is PostgreSQL as the queue: a worker.Source whose
// fetch leases attempts straight from the outbox (repo.FetchLeases), with
// no relay, no broker and no AcquireLease. Any number of processes can
// work one database: SKIP LOCKED shares the rows out, the leases fence
// stale workers, and a lost worker's attempts are fetched again at their
// lease's expiry. Fetches interleave tenants, so one tenant's backlog
// cannot take every slot while other tenants wait.
//
// The source fetches for the slots waiting in Receive, as many as are
// free (up to BatchSize), again at once after a full batch, and sleeps
// when nothing is due: on LISTEN, woken by the commit that makes a row due
// (migration 0007: only idle listeners are notified, so a busy system's
// commits never notify; migration 0010: one idle listener per row, not
// every one), or at the next due time, or after PollInterval (less
// PollJitter) at the latest. PollOnly (for PgBouncer in transaction mode, where LISTEN
// does not work) only polls.
//
// A running source keeps the connections it fetches on between fetches:
// one for every eight of the pool's MaxConns, at most two, none in a pool
// of fewer than eight (internal/keptconn says why). Size the pool for them.
package pgsource

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/knowledgefs/kfsdb/internal/nilvalue"
	"github.com/knowledgefs/kfsdb/internal/pglisten"
	"github.com/knowledgefs/kfsdb/internal/runcfg"
	"github.com/knowledgefs/kfsdb/kfstype"
	"github.com/knowledgefs/kfsdb/observe"
	"github.com/knowledgefs/kfsdb/repo"
	"github.com/knowledgefs/kfsdb/worker"
)

// Defaults.
const (
	FollowUpIntervalDefault = 20 * time.Millisecond
	GatherWindowDefault     = 500 * time.Microsecond
	PollIntervalDefault     = time.Second
	WriteTimeoutDefault     = 10 * time.Second
)

// ErrNotBound: Receive or Run on a Source that no worker.New bound.
var ErrNotBound = errors.New("pgsource: source is not bound to a worker (pass it to worker.New)")

// Config configures a Source. Zero values take the defaults.
type Config struct {
	// BatchSize bounds one fetch (1..repo.MaxBatchSize). Defaults to the
	// worker's Concurrency (capped at repo.MaxBatchSize).
	BatchSize int32
	// FollowUpInterval is the longest wait before fetching again while a
	// due row is locked by another transaction (1, 2, 4 … ms up to it).
	// Defaults to 20 ms.
	FollowUpInterval time.Duration
	// GatherWindow is how long a fetch waits, after one that filled its
	// batch, for the slots that one served to ask again (up to BatchSize):
	// under a backlog with short handlers each fetch then serves every
	// free slot, not only those that waited as the last one came back
	// (4 leases per fetch of 8 slots without it). It applies only after a
	// full batch, so it adds nothing to an idle queue's wake-up. Defaults
	// to 500 µs; negative: no wait.
	GatherWindow time.Duration
	// Logger receives structured logs. Defaults to slog.Default().
	Logger *slog.Logger
	// MaxTenants bounds the tenants one fetch looks at. Defaults to
	// repo.FetchMaxTenantsDefault (64).
	MaxTenants int32
	// Metrics receives counts. Defaults to observe.Discard.
	Metrics observe.Metrics
	// PerTenant bounds what one tenant gets in one fetch. Defaults to
	// BatchSize: tenants are interleaved round by round, and a tenant
	// alone still fills a batch.
	PerTenant int32
	// PollInterval is the longest sleep when nothing wakes the source.
	// Defaults to 1 s.
	PollInterval time.Duration
	// PollJitter (0..1) shortens each idle sleep of a whole PollInterval
	// by a random part of up to PollJitter of it, so that a fleet of
	// sources started together (a deploy, a restart after a failover)
	// does not poll in lockstep; it matters most with PollOnly, where
	// every source polls. Defaults to 0: no jitter.
	PollJitter float64
	// PollOnly disables LISTEN (PgBouncer in transaction mode): the source
	// polls every PollInterval, or sooner when a row comes due.
	PollOnly bool
	// Repo runs FetchLeases. Defaults to repo.New(nil).
	Repo *repo.Repo
	// Tenants, when not nil, are the only tenants the source serves (an
	// include list), e.g. dedicated capacity for a large tenant: each
	// fetch walks this list (at most MaxTenants of it) instead of every
	// tenant, with the same fairness among them and the same caps
	// (repo.SetTenantLimit, across every source). 1..repo.MaxTenantList
	// distinct tenant ids; an empty, non-nil list is refused, as it would
	// serve nobody (a list read from an empty setting, most likely). Not
	// with ExcludeTenants. Defaults to nil: every tenant.
	//
	// Wake-ups are not tenant-aware: a commit wakes one idle listener
	// (migration 0010), which may be a source that does not serve the
	// row's tenant; that one fetches once and sleeps again, and an idle
	// source that serves the tenant takes the row at its next fetch, within
	// its PollInterval. A busy source fetches again at once anyway.
	Tenants []string
	// ExcludeTenants are tenants the source never serves, e.g. a fleet for
	// every tenant but those with dedicated sources (a source with Tenants
	// beside it). Excluded tenants cost a fetch one index descent each,
	// whatever their backlog or history. At most repo.MaxTenantList
	// distinct tenant ids; nil or empty: none.
	ExcludeTenants []string
	// TraceContexts makes the source fetch the leased attempts' Start trace
	// contexts with the leases (FetchLeasesParams.TraceContexts, no extra
	// round trip) and carry them in its messages (worker.TracedMessage),
	// for a worker with a Tracer. Defaults to false.
	TraceContexts bool
	// WriteTimeout bounds each of the source's calls to the database: a
	// fetch (with its connection's acquisition), an idle registration, and
	// the hand-back of leases no slot took when the source stops. A call on
	// a connection that died without a word ends by it. Defaults to 10 s.
	WriteTimeout time.Duration
}

// Source is a worker.LeasingSource on PostgreSQL. Create it with New and
// pass it to worker.New, which binds it and runs it. Safe for concurrent
// use.
type Source struct {
	pool *pgxpool.Pool
	cfg  Config
	log  *slog.Logger

	mu            sync.Mutex // guards the binding and every request's abandoned
	workerID      string
	leaseDuration time.Duration
	batchSize     int32
	// requests carries each Receive call waiting for a lease to Run, which
	// fetches as many leases as there are requests (its slots' demand).
	requests chan *request

	running   atomic.Bool
	wake      *pglisten.Wakeup
	listening atomic.Bool
}

// New returns a Source on pool. cfg may be nil. Bad arguments and Config
// fields are refused with a *repo.InputError naming them ("pool",
// "Config.BatchSize", …; errors.Is repo.ErrInvalidInput), as are Bind,
// Receive and Run on a Source not made by New, with a nil ctx, or bound to
// a second worker.
func New(pool *pgxpool.Pool, cfg *Config) (*Source, error) {
	if pool == nil {
		return nil, runcfg.Invalid("pgsource", "pool", "must not be nil")
	}
	c := Config{}
	if cfg != nil {
		c = *cfg
	}
	c.FollowUpInterval = cmp.Or(c.FollowUpInterval, FollowUpIntervalDefault)
	c.GatherWindow = cmp.Or(c.GatherWindow, GatherWindowDefault)
	c.PollInterval = cmp.Or(c.PollInterval, PollIntervalDefault)
	c.WriteTimeout = cmp.Or(c.WriteTimeout, WriteTimeoutDefault)
	c.MaxTenants = cmp.Or(c.MaxTenants, repo.FetchMaxTenantsDefault)
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.Metrics == nil {
		c.Metrics = observe.Discard{}
	}
	if c.Repo == nil {
		c.Repo = repo.New(nil)
	}
	switch {
	case c.BatchSize < 0 || c.BatchSize > repo.MaxBatchSize:
		return nil, runcfg.Invalid("pgsource", "Config.BatchSize", fmt.Sprintf("must be 0 (default) or 1..%d, got %d", repo.MaxBatchSize, c.BatchSize))
	case c.PerTenant < 0 || c.PerTenant > repo.MaxBatchSize:
		return nil, runcfg.Invalid("pgsource", "Config.PerTenant", fmt.Sprintf("must be 0 (default) or 1..%d, got %d", repo.MaxBatchSize, c.PerTenant))
	case c.MaxTenants < 1 || c.MaxTenants > repo.MaxFetchTenants:
		return nil, runcfg.Invalid("pgsource", "Config.MaxTenants", fmt.Sprintf("must be 0 (default) or 1..%d, got %d", repo.MaxFetchTenants, c.MaxTenants))
	case !(c.PollJitter >= 0 && c.PollJitter <= 1): // also refuses NaN
		return nil, runcfg.Invalid("pgsource", "Config.PollJitter", fmt.Sprintf("must be 0..1 (a fraction of PollInterval), got %v", c.PollJitter))
	case nilvalue.Is(c.Metrics):
		return nil, runcfg.Invalid("pgsource", "Config.Metrics", fmt.Sprintf("is a nil %T", c.Metrics))
	}
	var ie *repo.InputError
	if err := repo.ValidateTenantLists(c.Tenants, c.ExcludeTenants); errors.As(err, &ie) {
		return nil, runcfg.Invalid("pgsource", "Config."+ie.Field, ie.Reason)
	}
	// The source's own copies: the caller's slices may change after New.
	c.Tenants, c.ExcludeTenants = slices.Clone(c.Tenants), slices.Clone(c.ExcludeTenants)
	if err := runcfg.NonNegative("pgsource", runcfg.Duration{Field: "Config.FollowUpInterval", Value: c.FollowUpInterval},
		runcfg.Duration{Field: "Config.PollInterval", Value: c.PollInterval},
		runcfg.Duration{Field: "Config.WriteTimeout", Value: c.WriteTimeout}); err != nil {
		return nil, err
	}
	return &Source{pool: pool, cfg: c, log: c.Logger, wake: pglisten.NewWakeup()}, nil
}

// Bind implements worker.LeasingSource: worker.New calls it with the
// worker's id, lease duration and concurrency.
func (s *Source) Bind(workerID string, leaseDuration time.Duration, slots int) error {
	if s == nil || s.pool == nil {
		return runcfg.NotMade("pgsource", "Source")
	}
	if err := runcfg.ValidID("pgsource", "workerID", workerID); err != nil {
		return err
	}
	if leaseDuration <= 0 {
		return runcfg.Invalid("pgsource", "leaseDuration", fmt.Sprintf("must be positive, got %s", leaseDuration))
	}
	if slots < 1 {
		return runcfg.Invalid("pgsource", "slots", fmt.Sprintf("must be positive, got %d", slots))
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.workerID != "" {
		return runcfg.Invalid("pgsource", "Source", fmt.Sprintf("is bound to worker %q already (one Source per worker)", s.workerID))
	}
	s.workerID, s.leaseDuration = workerID, leaseDuration
	s.batchSize = cmp.Or(s.cfg.BatchSize, int32(min(slots, repo.MaxBatchSize)))
	s.requests = make(chan *request, slots)
	s.log = s.cfg.Logger.With("worker", workerID)
	return nil
}

func (s *Source) bound() (chan *request, error) {
	if s == nil || s.pool == nil {
		return nil, runcfg.NotMade("pgsource", "Source")
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.workerID == "" {
		return nil, ErrNotBound
	}
	return s.requests, nil
}

// request is one Receive call waiting for a lease. Run answers it on reply
// (room for one, so Run never blocks) unless the call gave up first
// (abandoned, under Source.mu): then the lease goes to the next request,
// or is handed back.
type request struct {
	reply     chan *message
	abandoned bool
}

// Receive implements worker.Source: it waits for a lease fetched for this
// call. The returned message is a worker.LeasedMessage.
func (s *Source) Receive(ctx context.Context) (worker.Message, error) {
	if nilvalue.Is(ctx) {
		return nil, runcfg.Invalid("pgsource", "ctx", "must not be nil")
	}
	requests, err := s.bound()
	if err != nil {
		return nil, err
	}
	req := &request{reply: make(chan *message, 1)}
	select {
	case requests <- req:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	select {
	case m := <-req.reply:
		return m, nil
	case <-ctx.Done():
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	select {
	case m := <-req.reply:
		// Answered as ctx ended: the caller owns the lease (a worker hands
		// it back at once).
		return m, nil
	default:
		req.abandoned = true
		return nil, ctx.Err()
	}
}

// message is a lease fetched for a slot.
type message struct {
	attempt *kfstype.Attempt
	lease   *repo.Lease
	trace   kfstype.TraceContext
}

// Delivery names the attempt and the queue job id the fetch gave it.
func (m *message) Delivery() repo.Delivery {
	d := repo.Delivery{AttemptID: m.attempt.ID}
	if m.attempt.QueueJobID != nil {
		d.QueueJobID = *m.attempt.QueueJobID
	}
	return d
}

// TraceContext implements worker.TracedMessage: the Start's trace context
// when Config.TraceContexts is set and Start stored one.
func (m *message) TraceContext() kfstype.TraceContext { return m.trace }

// Leased implements worker.LeasedMessage.
func (m *message) Leased() (*kfstype.Attempt, *repo.Lease) { return m.attempt, m.lease }

// Ack does nothing: the outcome's write was the acknowledgement.
func (m *message) Ack(context.Context) error { return nil }

// Retry does nothing: the attempt's outbox row is due again at the lease's
// expiry, when a fetch takes it (this worker's or another's).
func (m *message) Retry(context.Context, time.Time) error { return nil }
