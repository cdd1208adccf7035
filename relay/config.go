package relay

import (
	"cmp"
	"fmt"
	"log/slog"
	"time"

	"github.com/knowledgefs/kfsdb/internal/nilvalue"
	"github.com/knowledgefs/kfsdb/internal/runcfg"
	"github.com/knowledgefs/kfsdb/observe"
	"github.com/knowledgefs/kfsdb/repo"
)

// Defaults, from the upstream platform. LockDuration, MaxDispatchAttempts
// and VisibilityTimeout default to the repo transitions' own defaults
// (repo.LockDurationDefault, repo.MaxDispatchAttemptsDefault,
// repo.VisibilityTimeoutDefault), defined there once.
const (
	BackoffBaseDefault      = time.Second
	BackoffCapDefault       = 60 * time.Second
	BatchSizeDefault        = repo.MaxBatchSize
	ConcurrencyDefault      = 10
	FollowUpIntervalDefault = 20 * time.Millisecond
	PollIntervalDefault     = time.Second
	PublishTimeoutDefault   = 10 * time.Second
	WriteTimeoutDefault     = 10 * time.Second
)

// Config configures a Relay. Zero values take the defaults.
type Config struct {
	// BackoffBase and BackoffCap shape the backoff after a failed publish:
	// min(cap, base·2^(n−1)) plus up to 20% jitter, n = dispatch attempts.
	// Default to 1 s and 60 s.
	BackoffBase time.Duration
	BackoffCap  time.Duration
	// BatchSize is how many rows one claim takes (1..repo.MaxBatchSize).
	// Defaults to BatchSizeDefault (100).
	BatchSize int32
	// Concurrency bounds publishes in flight. Defaults to 10.
	Concurrency int
	// ID names this relay in locked_by. Defaults to relay-<host>-<pid>-<random>.
	ID string
	// LockDuration is how long a claim holds a row; a relay that dies leaves
	// its rows to be reclaimed after it. Defaults to
	// repo.LockDurationDefault (30 s).
	LockDuration time.Duration
	// Logger receives structured logs. Defaults to slog.Default().
	Logger *slog.Logger
	// MaxDispatchAttempts dead-letters a row after this many failed
	// publications. Defaults to repo.MaxDispatchAttemptsDefault (10).
	MaxDispatchAttempts int32
	// Metrics receives counts. Defaults to observe.Discard.
	Metrics observe.Metrics
	// PollInterval is the longest wait between claims when nothing wakes
	// the relay. Defaults to 1 s.
	PollInterval time.Duration
	// FollowUpInterval is the wait before claiming again after a batch
	// that found rows but was not full: a busy relay is not notified, so
	// it looks again soon on its own, and rows arriving meanwhile go out
	// together. Defaults to 20 ms.
	FollowUpInterval time.Duration
	// PollOnly disables LISTEN/NOTIFY, for PgBouncer in transaction pooling
	// mode, where a session's LISTEN does not survive. Defaults to false.
	PollOnly bool
	// PublishTimeout bounds one Publish call. Defaults to 10 s.
	PublishTimeout time.Duration
	// Repo runs the transitions. Defaults to repo.New(nil).
	Repo *repo.Repo
	// TraceContexts makes the relay read the claimed attempts' Start trace
	// contexts (one more statement per claimed batch) and pass each in
	// Message.TraceContext, for a tracing Publisher such as adapters/otel's
	// WrapPublisher. Defaults to false: messages carry none.
	TraceContexts bool
	// VisibilityTimeout is how long a published message may wait for a
	// worker before it is republished. Defaults to
	// repo.VisibilityTimeoutDefault (60 s).
	VisibilityTimeout time.Duration
	// WriteTimeout bounds each of the relay's calls to the database: a
	// claim, reading its trace contexts, an idle registration, and
	// recording a batch's results (MarkDispatched, ReleaseOutbox), which
	// runs even while the relay stops. A call on a connection that died
	// without a word (a primary lost in a failover) ends by it instead of
	// the kernel's TCP timeout (~15 minutes). Defaults to 10 s.
	WriteTimeout time.Duration
}

func (c *Config) withDefaults() *Config {
	out := *c
	out.BackoffBase = cmp.Or(c.BackoffBase, BackoffBaseDefault)
	out.BackoffCap = cmp.Or(c.BackoffCap, BackoffCapDefault)
	out.BatchSize = cmp.Or(c.BatchSize, BatchSizeDefault)
	out.Concurrency = cmp.Or(c.Concurrency, ConcurrencyDefault)
	out.LockDuration = cmp.Or(c.LockDuration, repo.LockDurationDefault)
	out.MaxDispatchAttempts = cmp.Or(c.MaxDispatchAttempts, repo.MaxDispatchAttemptsDefault)
	out.PollInterval = cmp.Or(c.PollInterval, PollIntervalDefault)
	out.FollowUpInterval = cmp.Or(c.FollowUpInterval, min(FollowUpIntervalDefault, out.PollInterval))
	out.PublishTimeout = cmp.Or(c.PublishTimeout, PublishTimeoutDefault)
	out.VisibilityTimeout = cmp.Or(c.VisibilityTimeout, repo.VisibilityTimeoutDefault)
	out.WriteTimeout = cmp.Or(c.WriteTimeout, WriteTimeoutDefault)
	out.ID = runcfg.ID(c.ID, "relay")
	out.Logger = runcfg.Logger(c.Logger)
	out.Metrics = runcfg.Metrics(c.Metrics)
	out.Repo = runcfg.Repo(c.Repo)
	return &out
}

// validate returns a *repo.InputError (see [New]) naming the first field
// that breaks a rule.
func (c *Config) validate() error {
	if err := runcfg.NonNegative("relay", runcfg.Duration{Field: "Config.BackoffBase", Value: c.BackoffBase},
		runcfg.Duration{Field: "Config.BackoffCap", Value: c.BackoffCap},
		runcfg.Duration{Field: "Config.FollowUpInterval", Value: c.FollowUpInterval},
		runcfg.Duration{Field: "Config.LockDuration", Value: c.LockDuration},
		runcfg.Duration{Field: "Config.PollInterval", Value: c.PollInterval},
		runcfg.Duration{Field: "Config.PublishTimeout", Value: c.PublishTimeout},
		runcfg.Duration{Field: "Config.VisibilityTimeout", Value: c.VisibilityTimeout},
		runcfg.Duration{Field: "Config.WriteTimeout", Value: c.WriteTimeout}); err != nil {
		return err
	}
	switch {
	case c.BackoffCap < c.BackoffBase:
		return runcfg.Invalid("relay", "Config.BackoffCap", fmt.Sprintf("%s is below BackoffBase %s", c.BackoffCap, c.BackoffBase))
	case c.BatchSize < 1 || c.BatchSize > repo.MaxBatchSize:
		return runcfg.Invalid("relay", "Config.BatchSize", fmt.Sprintf("must be 1..%d, got %d", repo.MaxBatchSize, c.BatchSize))
	case c.Concurrency < 1:
		return runcfg.Invalid("relay", "Config.Concurrency", fmt.Sprintf("must be > 0, got %d", c.Concurrency))
	case nilvalue.Is(c.Metrics):
		return runcfg.Invalid("relay", "Config.Metrics", fmt.Sprintf("is a nil %T", c.Metrics))
	case c.FollowUpInterval > c.PollInterval:
		return runcfg.Invalid("relay", "Config.FollowUpInterval", fmt.Sprintf("%s is longer than PollInterval %s", c.FollowUpInterval, c.PollInterval))
	case c.MaxDispatchAttempts < 1:
		return runcfg.Invalid("relay", "Config.MaxDispatchAttempts", fmt.Sprintf("must be > 0, got %d", c.MaxDispatchAttempts))
	case c.PublishTimeout >= c.LockDuration:
		return runcfg.Invalid("relay", "Config.PublishTimeout", fmt.Sprintf("%s must be shorter than LockDuration %s", c.PublishTimeout, c.LockDuration))
	}
	return runcfg.ValidID("relay", "Config.ID", c.ID)
}
