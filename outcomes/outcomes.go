// Package outcomes tells other processes that an attempt ended, without
// polling its row: migration 0012's trigger, opt-in, notifies channel
// kfsdb_outcomes when a transition ends an attempt (succeeded, failed,
// canceled, superseded; a worker's, a fetch's, the relay's or an
// operator's), and Listen hears it.
//
// The trigger is created disabled and costs nothing until the table's
// owner enables it (Enable, or the SQL in the migration's comment); once
// on, every terminal commit takes PostgreSQL's global notify lock through
// its WAL flush, which serializes those commits across the cluster
// (docs/PERFORMANCE.md, "Outcome notifications", measures it). Within one
// worker process, worker.Config.Events says the same for free.
//
// A notification is a hint, as always with LISTEN: one sent while nobody
// listened is gone. A program that waits for an attempt's end reads the
// attempt once LISTEN is in place (ListenConfig.Listening), then waits
// for its notification.
package outcomes

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/knowledgefs/kfsdb/internal/nilvalue"
	"github.com/knowledgefs/kfsdb/internal/runcfg"
	"github.com/knowledgefs/kfsdb/kfstype"
	"github.com/knowledgefs/kfsdb/repo"
)

// Channel is the channel migration 0012's trigger notifies.
const Channel = "kfsdb_outcomes"

// Trigger is the trigger's name, on document_compilation_attempts.
const Trigger = "document_compilation_attempts_outcome_notify"

// LockTimeoutDefault is Enable's and Disable's lock_timeout when given 0.
const LockTimeoutDefault = 5 * time.Second

// ErrNotInstalled: Enable, Disable or Enabled found no trigger (migration
// 0012 is not applied).
var ErrNotInstalled = errors.New("outcomes: the notification trigger is not installed (apply migration 0012)")

// Outcome is one notification: an attempt that ended.
type Outcome struct {
	AttemptID uuid.UUID
	TenantID  string
	// RunState is the terminal state: succeeded, failed, canceled or
	// superseded.
	RunState kfstype.RunState
	// ErrorCode is the attempt's last_error_code, "" when it has none (a
	// success; a cancel without a reason).
	ErrorCode string
}

// payload is the trigger's JSON.
type payload struct {
	AttemptID *uuid.UUID `json:"attempt_id"`
	TenantID  *string    `json:"tenant_id"`
	RunState  *string    `json:"run_state"`
	ErrorCode *string    `json:"error_code"`
}

// PayloadError is Parse's refusal of a payload that is not an outcome.
type PayloadError struct {
	Payload string
	Reason  string
}

// Error says why the payload was refused; it is safe on a nil
// *PayloadError.
func (e *PayloadError) Error() string {
	if e == nil {
		return "outcomes.PayloadError(nil)"
	}
	return fmt.Sprintf("outcomes: not an outcome payload (%s): %q", e.Reason, e.Payload)
}

// Parse reads a kfsdb_outcomes payload. A payload that is not one of the
// trigger's (another NOTIFY on the channel) is refused with a
// *PayloadError.
func Parse(s string) (Outcome, error) {
	var p payload
	if err := json.Unmarshal([]byte(s), &p); err != nil {
		return Outcome{}, &PayloadError{Payload: s, Reason: err.Error()}
	}
	switch {
	case p.AttemptID == nil || *p.AttemptID == uuid.Nil:
		return Outcome{}, &PayloadError{Payload: s, Reason: "no attempt_id"}
	case p.TenantID == nil:
		return Outcome{}, &PayloadError{Payload: s, Reason: "no tenant_id"}
	case p.RunState == nil || !kfstype.RunState(*p.RunState).Terminal():
		return Outcome{}, &PayloadError{Payload: s, Reason: "no terminal run_state"}
	}
	o := Outcome{AttemptID: *p.AttemptID, TenantID: *p.TenantID, RunState: kfstype.RunState(*p.RunState)}
	if p.ErrorCode != nil {
		o.ErrorCode = *p.ErrorCode
	}
	return o, nil
}

// Enable turns the notifications on: ALTER TABLE ... ENABLE TRIGGER, as
// the table's owner (db's role must own document_compilation_attempts).
// It waits at most lockTimeout (0: LockTimeoutDefault) for the statement's
// SHARE ROW EXCLUSIVE lock, which transactions writing attempts hold, and
// for which writers queue while it waits; past it, PostgreSQL refuses
// with SQLSTATE 55P03 (lock_not_available) and nothing changes. On a
// pool, the setting and the statement run in one implicit transaction;
// in the caller's transaction, the lock_timeout holds until its end.
func Enable(ctx context.Context, db repo.DBTX, lockTimeout time.Duration) error {
	return setTrigger(ctx, db, "ENABLE", lockTimeout)
}

// Disable turns the notifications off (ALTER TABLE ... DISABLE TRIGGER),
// as Enable turns them on.
func Disable(ctx context.Context, db repo.DBTX, lockTimeout time.Duration) error {
	return setTrigger(ctx, db, "DISABLE", lockTimeout)
}

func setTrigger(ctx context.Context, db repo.DBTX, verb string, lockTimeout time.Duration) error {
	if err := usable(ctx, db); err != nil {
		return err
	}
	if lockTimeout < 0 {
		return runcfg.Invalid("outcomes", "lockTimeout", fmt.Sprintf("must not be negative, got %s", lockTimeout))
	}
	if lockTimeout == 0 {
		lockTimeout = LockTimeoutDefault
	}
	if _, err := Enabled(ctx, db); err != nil {
		return err
	}
	// No arguments: pgx sends both statements in one simple-protocol
	// message, which PostgreSQL runs as one implicit transaction, so SET
	// LOCAL holds for the ALTER and no longer.
	ms := max(lockTimeout.Milliseconds(), 1)
	sql := fmt.Sprintf(`SET LOCAL lock_timeout = %d; ALTER TABLE document_compilation_attempts %s TRIGGER %s`, ms, verb, Trigger)
	if _, err := db.Exec(ctx, sql); err != nil {
		return fmt.Errorf("outcomes: %s trigger %s: %w", verb, Trigger, err)
	}
	return nil
}

// Enabled reports whether the notifications are on, or ErrNotInstalled.
func Enabled(ctx context.Context, db repo.DBTX) (bool, error) {
	if err := usable(ctx, db); err != nil {
		return false, err
	}
	var on bool
	err := db.QueryRow(ctx, `SELECT t.tgenabled <> 'D' FROM pg_catalog.pg_trigger t
		WHERE t.tgrelid = to_regclass('document_compilation_attempts') AND t.tgname = $1`, Trigger).Scan(&on)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return false, ErrNotInstalled
	case err != nil:
		return false, fmt.Errorf("outcomes: read trigger %s: %w", Trigger, err)
	}
	return on, nil
}

func usable(ctx context.Context, db repo.DBTX) error {
	switch {
	case nilvalue.Is(ctx):
		return runcfg.Invalid("outcomes", "ctx", "must not be nil")
	case nilvalue.Is(db):
		return runcfg.Invalid("outcomes", "db", "must not be nil")
	}
	return nil
}

// ListenConfig configures Listen. Zero values take the defaults.
type ListenConfig struct {
	// Listening is called once LISTEN is in place, before any outcome: the
	// moment to read the state of the attempts the caller waits for, since
	// an outcome committed before it is not delivered. Defaults to nil.
	Listening func()
	// Malformed receives each payload Parse refuses (a NOTIFY on the
	// channel by something else), with its *PayloadError. Defaults to nil:
	// such payloads are skipped.
	Malformed func(payload string, err error)
}

// Listen holds one of pool's connections in LISTEN kfsdb_outcomes and
// calls handle with each outcome, on Listen's goroutine and in commit
// order, until ctx ends (it returns ctx.Err()) or the connection fails (it
// returns the error: call it again, and read again what was missed). A
// slow handle delays the next outcome but loses none (PostgreSQL queues
// them, up to its notification queue's 8 GB). The connection is closed,
// not returned to the pool, as Listen returns. cfg may be nil.
func Listen(ctx context.Context, pool *pgxpool.Pool, handle func(Outcome), cfg *ListenConfig) error {
	switch {
	case nilvalue.Is(ctx):
		return runcfg.Invalid("outcomes", "ctx", "must not be nil")
	case pool == nil:
		return runcfg.Invalid("outcomes", "pool", "must not be nil")
	case handle == nil:
		return runcfg.Invalid("outcomes", "handle", "must not be nil")
	}
	if cfg == nil {
		cfg = &ListenConfig{}
	}
	conn, err := pool.Acquire(ctx)
	if err != nil {
		return fmt.Errorf("outcomes: listen: %w", err)
	}
	// A connection that was LISTENing goes back to nobody.
	defer func() { _ = conn.Hijack().Close(context.WithoutCancel(ctx)) }()
	if _, err := conn.Exec(ctx, "LISTEN "+Channel); err != nil {
		return fmt.Errorf("outcomes: listen: %w", err)
	}
	if cfg.Listening != nil {
		cfg.Listening()
	}
	for {
		n, err := conn.Conn().WaitForNotification(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return fmt.Errorf("outcomes: listen: %w", err)
		}
		o, err := Parse(n.Payload)
		if err != nil {
			if cfg.Malformed != nil {
				cfg.Malformed(n.Payload, err)
			}
			continue
		}
		handle(o)
	}
}
