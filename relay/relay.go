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
	"context"
	"encoding/json"
	"log/slog"
	"sync/atomic"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/knowledgefs/kfsdb/internal/nilvalue"
	"github.com/knowledgefs/kfsdb/internal/pglisten"
	"github.com/knowledgefs/kfsdb/internal/runcfg"
	"github.com/knowledgefs/kfsdb/kfstype"
)

// NotifyChannel is the channel on which a commit that made an outbox row
// due (Start, StartMany, RetryFailed, ReleaseDeferred, ScheduleRetry, a
// relay's backoff) notifies idle relays; the payload is the row's due
// time. Migration 0007's trigger sends it, at commit, and only while some
// relay is registered idle (repo.OutboxListenerIdle).
const NotifyChannel = pglisten.Channel

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
	// TraceContext is the attempt's Start trace context when
	// Config.TraceContexts is set and Start stored one; a tracing
	// Publisher replaces it with its own span's, and the broker carries it
	// beside the payload (message headers) for the worker
	// (worker.TracedMessage). Zero otherwise.
	TraceContext kfstype.TraceContext
	// LockToken is this claim's token, new at every claim. IdempotencyKey
	// names the row, which is published again after a retry, a visibility
	// timeout or a lost lease; with LockToken a broker's deduplication can
	// drop a repeat of this publication (a publisher's own retry) without
	// dropping those later ones.
	LockToken uuid.UUID
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

// Relay publishes the outbox. Create it with New; Run blocks until its
// context ends. Safe for concurrent use; run several relays for
// availability, they share the work through SKIP LOCKED claims.
type Relay struct {
	cfg  *Config
	pool *pgxpool.Pool
	pub  Publisher
	log  *slog.Logger
	// wake holds the earliest due time LISTEN notifications announced.
	wake *pglisten.Wakeup
	// listening is true while the LISTEN connection is in place; only then
	// may the relay register idle and sleep on notifications.
	listening atomic.Bool
	// testSignals are for tests (TestSignals); they do nothing until a
	// test initializes them.
	testSignals TestSignals
}

// New returns a relay publishing through pub. cfg may be nil. Bad
// arguments and Config fields are refused with a *repo.InputError naming
// them ("pool", "pub", "Config.BatchSize", …; errors.Is
// repo.ErrInvalidInput), as are Run and RunOnce on a Relay not made by New
// or with a nil ctx.
func New(pool *pgxpool.Pool, pub Publisher, cfg *Config) (*Relay, error) {
	if pool == nil {
		return nil, runcfg.Invalid("relay", "pool", "must not be nil")
	}
	if nilvalue.Is(pub) {
		return nil, runcfg.Invalid("relay", "pub", "must not be nil")
	}
	if cfg == nil {
		cfg = &Config{}
	}
	c := cfg.withDefaults()
	if err := c.validate(); err != nil {
		return nil, err
	}
	return &Relay{cfg: c, pool: pool, pub: pub, log: c.Logger.With("relay", c.ID), wake: pglisten.NewWakeup()}, nil
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
	return runcfg.Usable(ctx, "relay", "Relay", r != nil && r.cfg != nil)
}
