// Package relay publishes the compilation outbox: it claims due outbox rows
// in batches, publishes each through a Publisher with bounded concurrency,
// records the publications in one batched statement, and backs off or
// dead-letters rows whose publication failed. Expired claims (a relay that
// died mid-batch) are recovered by the claim itself.
//
// Publication is at least once: a row is published before it is marked, so
// a relay that dies in between publishes it again once its claim expires.
// Consumers dedupe by Message.IdempotencyKey; the worker refuses stale
// queue job ids.
package relay

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/knowledgefs/kfsdb/internal/backoff"
	"github.com/knowledgefs/kfsdb/internal/nilvalue"
	"github.com/knowledgefs/kfsdb/internal/testsignal"
	"github.com/knowledgefs/kfsdb/kfstype"
	"github.com/knowledgefs/kfsdb/observe"
	"github.com/knowledgefs/kfsdb/repo"
)

// NotifyChannel is the channel on which a commit that made an outbox row
// due (Start, StartMany, RetryFailed, ReleaseDeferred, ScheduleRetry, a
// relay's backoff) notifies idle relays; the payload is the row's due
// time. Migration 0007's trigger sends it, at commit, and only while some
// relay is registered idle (repo.OutboxListenerIdle).
const NotifyChannel = "kfsdb_outbox"

// Message is one outbox row to publish.
type Message struct {
	ID             uuid.UUID
	AttemptID      uuid.UUID
	IdempotencyKey string
	EventType      string
	SchemaVersion  int32
	// Payload is exactly {"attemptId":"<uuid>"}.
	Payload json.RawMessage
	// DispatchAttempts counts publications of this row, this one included.
	DispatchAttempts int32
}

// Publication is what the queue returned for a published message.
type Publication struct {
	// QueueJobID is the queue's id for the message (1..255 characters); the
	// worker presents it to AcquireLease.
	QueueJobID string
	// ExternalJobID is an optional second id.
	ExternalJobID *string
}

// Publisher publishes one message to the queue. It must be safe for
// concurrent use; an error counts as a failed dispatch attempt.
type Publisher interface {
	Publish(ctx context.Context, msg *Message) (*Publication, error)
}

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
	// VisibilityTimeout is how long a published message may wait for a
	// worker before it is republished. Defaults to
	// repo.VisibilityTimeoutDefault (60 s).
	VisibilityTimeout time.Duration
	// WriteTimeout bounds recording a batch's results (MarkDispatched,
	// ReleaseOutbox), which runs even while the relay stops. Defaults to 10 s.
	WriteTimeout time.Duration

	// TestSignals are for tests; they do nothing until initialized.
	TestSignals TestSignals
}

// TestSignals report relay events to tests.
type TestSignals struct {
	// BatchDone carries the number of rows of each claimed batch once
	// they are all marked or released.
	BatchDone testsignal.Signal[int]
	// Listening fires once LISTEN is in place.
	Listening testsignal.Signal[struct{}]
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
	if out.ID == "" {
		host, _ := os.Hostname()
		out.ID = fmt.Sprintf("relay-%s-%d-%s", host, os.Getpid(), uuid.NewString()[:8])
	}
	if out.Logger == nil {
		out.Logger = slog.Default()
	}
	if out.Metrics == nil {
		out.Metrics = observe.Discard{}
	}
	if out.Repo == nil {
		out.Repo = repo.New(nil)
	}
	return &out
}

func (c *Config) validate() error {
	switch {
	case c.BackoffBase < 0 || c.BackoffCap < 0:
		return errors.New("relay: BackoffBase and BackoffCap must not be negative")
	case c.BackoffCap < c.BackoffBase:
		return fmt.Errorf("relay: BackoffCap %s is below BackoffBase %s", c.BackoffCap, c.BackoffBase)
	case c.BatchSize < 1 || c.BatchSize > repo.MaxBatchSize:
		return fmt.Errorf("relay: BatchSize must be 1..%d, got %d", repo.MaxBatchSize, c.BatchSize)
	case c.Concurrency < 1:
		return fmt.Errorf("relay: Concurrency must be > 0, got %d", c.Concurrency)
	case repo.ValidateWorkerID(c.ID) != nil:
		return fmt.Errorf("relay: ID: %w", repo.ValidateWorkerID(c.ID))
	case nilvalue.Is(c.Metrics):
		return fmt.Errorf("relay: Metrics is a nil %T", c.Metrics)
	case c.FollowUpInterval > c.PollInterval:
		return fmt.Errorf("relay: FollowUpInterval %s is longer than PollInterval %s", c.FollowUpInterval, c.PollInterval)
	case c.LockDuration < 0 || c.PollInterval < 0 || c.FollowUpInterval < 0 || c.PublishTimeout < 0 || c.VisibilityTimeout < 0 || c.WriteTimeout < 0:
		return errors.New("relay: durations must not be negative")
	case c.MaxDispatchAttempts < 1:
		return fmt.Errorf("relay: MaxDispatchAttempts must be > 0, got %d", c.MaxDispatchAttempts)
	case c.PublishTimeout >= c.LockDuration:
		return fmt.Errorf("relay: PublishTimeout %s must be shorter than LockDuration %s", c.PublishTimeout, c.LockDuration)
	}
	return nil
}

// Relay publishes the outbox. Create it with New; Run blocks until its
// context ends. Safe for concurrent use; run several relays for
// availability, they share the work through SKIP LOCKED claims.
type Relay struct {
	cfg  *Config
	pool *pgxpool.Pool
	pub  Publisher
	log  *slog.Logger
	// wake holds the earliest due time LISTEN notifications announced.
	wake *wakeup
	// listening is true while the LISTEN connection is in place; only then
	// may the relay register idle and sleep on notifications.
	listening atomic.Bool
}

// New returns a relay publishing through pub. cfg may be nil.
func New(pool *pgxpool.Pool, pub Publisher, cfg *Config) (*Relay, error) {
	if pool == nil {
		return nil, errors.New("relay: pool is nil")
	}
	if nilvalue.Is(pub) {
		return nil, errors.New("relay: publisher is nil")
	}
	if cfg == nil {
		cfg = &Config{}
	}
	c := cfg.withDefaults()
	if err := c.validate(); err != nil {
		return nil, err
	}
	return &Relay{cfg: c, pool: pool, pub: pub, log: c.Logger.With("relay", c.ID), wake: newWakeup()}, nil
}

// ID returns the relay's id ("" for a nil Relay).
func (r *Relay) ID() string {
	if r == nil || r.cfg == nil {
		return ""
	}
	return r.cfg.ID
}

// usable refuses a Relay not made by New and a nil context.
func (r *Relay) usable(ctx context.Context) error {
	switch {
	case r == nil || r.cfg == nil:
		return errors.New("relay: the Relay is nil or was not made by relay.New")
	case nilvalue.Is(ctx):
		return errors.New("relay: ctx is nil")
	}
	return nil
}

// outcome is the result of publishing one claimed row.
type outcome struct {
	msg *kfstype.OutboxMessage
	pub *Publication
	err error
}

// RunOnce claims one batch, publishes it and records the results. It
// returns how many rows it claimed. Tests call it directly.
func (r *Relay) RunOnce(ctx context.Context) (int, error) {
	if err := r.usable(ctx); err != nil {
		return 0, err
	}
	msgs, err := r.cfg.Repo.ClaimOutbox(ctx, r.pool, &repo.ClaimParams{
		RelayID: r.cfg.ID, BatchSize: r.cfg.BatchSize, LockDuration: r.cfg.LockDuration,
	})
	if err != nil {
		return 0, fmt.Errorf("relay %s: claim: %w", r.cfg.ID, err)
	}
	if len(msgs) == 0 {
		return 0, nil
	}
	r.cfg.Metrics.Add(observe.Claimed, int64(len(msgs)))

	outcomes := make([]outcome, len(msgs))
	sem := make(chan struct{}, r.cfg.Concurrency)
	var wg sync.WaitGroup
	for i, m := range msgs {
		outcomes[i].msg = m
		if ctx.Err() != nil {
			outcomes[i].err = ctx.Err() // shutting down: leave the rest claimed
			continue
		}
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			outcomes[i].pub, outcomes[i].err = r.publish(ctx, m)
		}()
	}
	wg.Wait()

	// Record what happened even if ctx ended: what was published must be
	// marked, or it is published again after the lock expires.
	wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), r.cfg.WriteTimeout)
	defer cancel()
	var errs []error
	if err := r.markPublished(wctx, outcomes); err != nil {
		errs = append(errs, err)
	}
	for _, o := range outcomes {
		if o.err == nil || errors.Is(o.err, context.Canceled) && ctx.Err() != nil {
			continue
		}
		if err := r.release(wctx, o); err != nil {
			errs = append(errs, err)
		}
	}
	r.cfg.TestSignals.BatchDone.Signal(len(msgs))
	return len(msgs), errors.Join(errs...)
}

func (r *Relay) publish(ctx context.Context, m *kfstype.OutboxMessage) (*Publication, error) {
	payload, err := repo.DecodePayload(m.Payload)
	if err != nil {
		return nil, fmt.Errorf("corrupt payload: %w", err)
	}
	if payload.AttemptID != m.AttemptID {
		return nil, fmt.Errorf("corrupt payload: names attempt %s, row belongs to %s", payload.AttemptID, m.AttemptID)
	}
	pctx, cancel := context.WithTimeout(ctx, r.cfg.PublishTimeout)
	defer cancel()
	pub, err := r.pub.Publish(pctx, &Message{
		ID: m.ID, AttemptID: m.AttemptID, IdempotencyKey: m.IdempotencyKey, EventType: m.EventType,
		SchemaVersion: m.SchemaVersion, Payload: m.Payload, DispatchAttempts: m.DispatchAttempts,
	})
	if err != nil {
		return nil, err
	}
	if pub == nil {
		return nil, errors.New("publisher returned no queue job id")
	}
	// A job id MarkDispatched would refuse fails this publication alone,
	// instead of the whole batch's record (which would publish every row
	// again once its claim expired).
	if err := repo.ValidateJobID(pub.QueueJobID); err != nil {
		return nil, fmt.Errorf("publisher returned an unusable queue job id: %w", err)
	}
	if pub.ExternalJobID != nil {
		if err := repo.ValidateJobID(*pub.ExternalJobID); err != nil {
			return nil, fmt.Errorf("publisher returned an unusable external job id: %w", err)
		}
	}
	return pub, nil
}

func (r *Relay) markPublished(ctx context.Context, outcomes []outcome) error {
	var ds []repo.Dispatch
	for _, o := range outcomes {
		if o.err == nil {
			ds = append(ds, repo.Dispatch{OutboxID: o.msg.ID, LockToken: *o.msg.LockToken, QueueJobID: o.pub.QueueJobID, ExternalJobID: o.pub.ExternalJobID})
		}
	}
	if len(ds) == 0 {
		return nil
	}
	res, err := r.cfg.Repo.MarkDispatched(ctx, r.pool, &repo.MarkDispatchedParams{Dispatches: ds, VisibilityTimeout: r.cfg.VisibilityTimeout})
	if err != nil {
		// The rows stay claimed; once the lock expires they are published
		// again (at least once).
		return fmt.Errorf("relay %s: mark %d published rows: %w", r.cfg.ID, len(ds), err)
	}
	r.cfg.Metrics.Add(observe.Published, int64(len(res.Marked)))
	if len(res.Refused) > 0 {
		r.cfg.Metrics.Add(observe.MarkRefused, int64(len(res.Refused)))
		r.log.InfoContext(ctx, "published rows no longer ours to mark (claim expired or attempt ended)", "rows", len(res.Refused))
	}
	return nil
}

func (r *Relay) release(ctx context.Context, o outcome) error {
	r.cfg.Metrics.Add(observe.PublishFailed, 1)
	delay := backoff.Jitter(backoff.Exponential(r.cfg.BackoffBase, r.cfg.BackoffCap, o.msg.DispatchAttempts), 0.2)
	row, err := r.cfg.Repo.ReleaseOutbox(ctx, r.pool, &repo.ReleaseOutboxParams{
		OutboxID: o.msg.ID, LockToken: *o.msg.LockToken, Backoff: delay,
		MaxDispatchAttempts: r.cfg.MaxDispatchAttempts, LastError: o.err.Error(),
	})
	if errors.Is(err, repo.ErrOutboxLockLost) {
		return nil // someone else holds the row now; nothing to record
	}
	if err != nil {
		return fmt.Errorf("relay %s: release row %s: %w", r.cfg.ID, o.msg.ID, err)
	}
	switch row.Status {
	case kfstype.OutboxStatusDead:
		r.cfg.Metrics.Add(observe.DeadLettered, 1)
		r.log.WarnContext(ctx, "outbox row dead-lettered", "outbox_id", row.ID, "attempt_id", row.AttemptID, "dispatch_attempts", row.DispatchAttempts, "err", o.err)
	case kfstype.OutboxStatusLeased:
		r.log.InfoContext(ctx, "publish failed; the attempt's lease is live, the row follows it again", "outbox_id", row.ID, "attempt_id", row.AttemptID, "dispatch_attempts", row.DispatchAttempts, "due_at", row.AvailableAt, "err", o.err)
	default:
		r.log.InfoContext(ctx, "publish failed; backing off", "outbox_id", row.ID, "attempt_id", row.AttemptID, "dispatch_attempts", row.DispatchAttempts, "retry_in", delay, "err", o.err)
	}
	return nil
}
