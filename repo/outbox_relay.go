package repo

// The relay's transitions, the Go twin of db/queries/outbox_relay.sql and
// in its order: ClaimOutbox, OutboxListenerIdle, OutboxListenerAwake,
// MarkDispatched and ReleaseOutbox; and DecodePayload, for what the relay
// publishes.

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/knowledgefs/kfsdb/db/gen"
	"github.com/knowledgefs/kfsdb/kfstype"
)

// ErrOutboxLockLost: MarkDispatched or ReleaseOutbox presented a lock token
// that no longer holds the row (the claim expired and another relay took
// it, or the attempt ended meanwhile). The publication is simply retried
// by whoever holds the row now; nothing is lost.
var ErrOutboxLockLost = errors.New("kfsdb: outbox lock lost")

// Relay defaults, from the upstream platform: a zero ClaimOutboxParams,
// MarkDispatchedParams or ReleaseOutboxParams field means them, and
// relay.Config's fields of the same names default to them.
const (
	// LockDurationDefault is ClaimOutboxParams.LockDuration's default.
	LockDurationDefault = 30 * time.Second
	// MaxDispatchAttemptsDefault is ReleaseOutboxParams.MaxDispatchAttempts'.
	MaxDispatchAttemptsDefault = 10
	// VisibilityTimeoutDefault is MarkDispatchedParams.VisibilityTimeout's.
	VisibilityTimeoutDefault = 60 * time.Second
)

// ClaimOutboxParams asks for due outbox rows.
type ClaimOutboxParams struct {
	// RelayID names the claiming relay (locked_by), 1..255 characters.
	RelayID string
	// BatchSize is 1..100.
	BatchSize int32
	// LockDuration is how long the claim holds each row before another
	// relay may recover it. Defaults to LockDurationDefault.
	LockDuration time.Duration
}

// ClaimOutbox locks up to BatchSize due outbox rows for publication, oldest
// due first: rows waiting for a (re)publication and rows whose previous
// claim expired. Each returned row carries its own LockToken; the attempt
// rows are not touched. Rows other relays hold are skipped, never waited on.
//
// Errors: *InputError.
func (r *Repo) ClaimOutbox(ctx context.Context, db DBTX, p *ClaimOutboxParams) ([]*kfstype.OutboxMessage, error) {
	v := r.call(ctx, db)
	if set(v, "ClaimOutboxParams", p) {
		v.claim("RelayID", p.RelayID, p.BatchSize, "LockDuration", p.LockDuration)
	}
	if err := v.result(); err != nil {
		return nil, err
	}
	lock := p.LockDuration
	if lock == 0 {
		lock = LockDurationDefault
	}
	rows, err := r.q.ClaimOutbox(ctx, db, &gen.ClaimOutboxParams{AsyncCommit: r.asyncProgress, RelayID: p.RelayID, Now: r.now(), LockDuration: lock, BatchSize: p.BatchSize})
	if err != nil {
		return nil, fmt.Errorf("claim outbox for relay %q: %w", p.RelayID, mapError(err))
	}
	out := make([]*kfstype.OutboxMessage, len(rows))
	for i, row := range rows {
		out[i] = outboxFromRow(row)
	}
	// RETURNING has no order; hand rows out in claim order.
	sort.Slice(out, func(i, j int) bool {
		a, b := out[i], out[j]
		if !a.AvailableAt.Equal(b.AvailableAt) {
			return a.AvailableAt.Before(b.AvailableAt)
		}
		if !a.CreatedAt.Equal(b.CreatedAt) {
			return a.CreatedAt.Before(b.CreatedAt)
		}
		return a.ID.String() < b.ID.String()
	})
	return out, nil
}

// OutboxListenerIdleParams registers a relay that found nothing to claim as idle,
// so that commits which make an outbox row due notify it.
type OutboxListenerIdleParams struct {
	// ListenerID is the relay's id (the RelayID it claims with), 1..255
	// characters: its next claim that finds rows ends the registration.
	ListenerID string
	// TTL (> 0) is how long the registration lasts unless refreshed by the
	// next OutboxListenerIdle; a relay that died asleep is forgotten then.
	TTL time.Duration
}

// OutboxListenerIdleResult says whether the relay may sleep.
type OutboxListenerIdleResult struct {
	// Registered: commits that make a row due now notify the relay. When
	// false (a commit was checking at that instant), the relay must poll
	// again shortly instead of sleeping.
	Registered bool
	// Inserted: the registration is new. Look once more before sleeping:
	// a row committed just before the registration is visible to any
	// statement begun after it, such as OutboxListenerIdle again (then a
	// refresh, whose NextDueIn says whether to claim) or a claim.
	Inserted bool
	// NextDueIn is how long until the earliest outbox row is or becomes
	// due, by the database's clock; nil when none will (only deferred rows
	// wait, or none). Zero or less: a due row was not claimed, because
	// another relay or a control-plane call held its lock.
	NextDueIn *time.Duration
}

// OutboxListenerIdle registers a relay as idle before it sleeps on LISTEN
// (migration 0007 describes the handshake with committing transactions).
// It never waits for a lock. Call it on the pool, not in a transaction:
// the registration must commit before the claim that follows it.
//
// Errors: *InputError.
func (r *Repo) OutboxListenerIdle(ctx context.Context, db DBTX, p *OutboxListenerIdleParams) (*OutboxListenerIdleResult, error) {
	v := r.call(ctx, db)
	if set(v, "OutboxListenerIdleParams", p) {
		v.text("ListenerID", p.ListenerID, MaxWorkerIDLength)
		v.duration("TTL", p.TTL)
	}
	if err := v.result(); err != nil {
		return nil, err
	}
	row, err := r.q.OutboxListenerIdle(ctx, db, &gen.OutboxListenerIdleParams{Now: r.now(), Ttl: p.TTL, ListenerID: p.ListenerID})
	if err != nil {
		return nil, fmt.Errorf("register relay %q idle: %w", p.ListenerID, mapError(err))
	}
	res := &OutboxListenerIdleResult{Registered: row.Registered, Inserted: row.Inserted}
	if row.HasNextDue {
		d := time.Duration(row.NextDueInUs) * time.Microsecond
		res.NextDueIn = &d
	}
	return res, nil
}

// OutboxListenerAwakeParams names the relay whose idle registration ends.
type OutboxListenerAwakeParams struct {
	// ListenerID is the relay's id, as registered by OutboxListenerIdle.
	ListenerID string
}

// OutboxListenerAwake ends a relay's idle registration: it stops, or it
// lost its LISTEN connection and polls until that is back.
//
// Errors: *InputError.
func (r *Repo) OutboxListenerAwake(ctx context.Context, db DBTX, p *OutboxListenerAwakeParams) error {
	v := r.call(ctx, db)
	if set(v, "OutboxListenerAwakeParams", p) {
		v.text("ListenerID", p.ListenerID, MaxWorkerIDLength)
	}
	if err := v.result(); err != nil {
		return err
	}
	if err := r.q.OutboxListenerAwake(ctx, db, p.ListenerID); err != nil {
		return fmt.Errorf("end idle registration of relay %q: %w", p.ListenerID, mapError(err))
	}
	return nil
}

// Dispatch records one successful publication of a claimed row.
type Dispatch struct {
	// OutboxID is the claimed row.
	OutboxID uuid.UUID
	// LockToken is the row's token from ClaimOutbox.
	LockToken uuid.UUID
	// QueueJobID is the queue's id for the message, 1..255 characters.
	QueueJobID string
	// ExternalJobID is an optional second id (1..255 characters).
	ExternalJobID *string
}

// MarkDispatchedParams is a batch of publications.
type MarkDispatchedParams struct {
	// Dispatches are 1..MaxBatchSize publications, each row named once.
	Dispatches []Dispatch
	// VisibilityTimeout is how long the queue message may wait for a worker
	// before the relay republishes it. Defaults to VisibilityTimeoutDefault.
	VisibilityTimeout time.Duration
}

// MarkDispatchedResult splits a batch into the rows marked and those
// refused (lock token no longer valid, or the attempt no longer waiting
// for a delivery); refused rows are unchanged.
type MarkDispatchedResult struct {
	// Marked are the rows now dispatched.
	Marked []*kfstype.OutboxMessage
	// Refused are the ids of the rows left unchanged, in input order.
	Refused []uuid.UUID
}

// MarkDispatched records a batch of publications in one statement: each
// outbox row becomes dispatched (due again after the visibility timeout)
// and its attempt takes the job ids and becomes queued (a running attempt
// with an expired lease stays running).
//
// Errors: *InputError. Per-row refusals are in the result.
func (r *Repo) MarkDispatched(ctx context.Context, db DBTX, p *MarkDispatchedParams) (*MarkDispatchedResult, error) {
	if v := r.call(ctx, db); !set(v, "MarkDispatchedParams", p) || v.err != nil {
		return nil, v.result()
	}
	var v validator
	if len(p.Dispatches) == 0 || len(p.Dispatches) > MaxBatchSize {
		v.fail("Dispatches", fmt.Sprintf("must hold 1..%d entries", MaxBatchSize))
	}
	if p.VisibilityTimeout != 0 {
		v.duration("VisibilityTimeout", p.VisibilityTimeout)
	}
	n := len(p.Dispatches)
	params := &gen.MarkDispatchedParams{AsyncCommit: r.asyncProgress,
		Now: r.now(), VisibilityTimeout: p.VisibilityTimeout,
		OutboxIDs: make([]uuid.UUID, n), LockTokens: make([]uuid.UUID, n),
		QueueJobIDs: make([]string, n), ExternalJobIDs: make([]string, n),
	}
	seen := make(map[uuid.UUID]bool, n)
	for i, d := range p.Dispatches {
		field := fmt.Sprintf("Dispatches[%d].", i)
		v.uuid(field+"OutboxID", d.OutboxID)
		v.uuid(field+"LockToken", d.LockToken)
		v.text(field+"QueueJobID", d.QueueJobID, MaxJobIDLength)
		v.optionalText(field+"ExternalJobID", d.ExternalJobID, MaxJobIDLength)
		if seen[d.OutboxID] {
			v.fail(field+"OutboxID", "appears twice in the batch")
		}
		seen[d.OutboxID] = true
		params.OutboxIDs[i], params.LockTokens[i], params.QueueJobIDs[i] = d.OutboxID, d.LockToken, d.QueueJobID
		if d.ExternalJobID != nil {
			params.ExternalJobIDs[i] = *d.ExternalJobID // "" travels as NULL
		}
	}
	if err := v.result(); err != nil {
		return nil, err
	}
	if params.VisibilityTimeout == 0 {
		params.VisibilityTimeout = VisibilityTimeoutDefault
	}
	rows, err := r.q.MarkDispatched(ctx, db, params)
	if err != nil {
		return nil, fmt.Errorf("mark %d outbox rows dispatched: %w", n, mapError(err))
	}
	res := &MarkDispatchedResult{Marked: make([]*kfstype.OutboxMessage, len(rows))}
	marked := make(map[uuid.UUID]bool, len(rows))
	for i, row := range rows {
		res.Marked[i] = outboxFromRow(row)
		marked[row.ID] = true
	}
	for _, d := range p.Dispatches {
		if !marked[d.OutboxID] {
			res.Refused = append(res.Refused, d.OutboxID)
		}
	}
	return res, nil
}

// ReleaseOutboxParams reports a failed publication.
type ReleaseOutboxParams struct {
	// OutboxID is the claimed row.
	OutboxID uuid.UUID
	// LockToken is the row's token from ClaimOutbox.
	LockToken uuid.UUID
	// Backoff (> 0) is when the row is due again; the relay computes it as
	// min(cap, base·2^(n−1)) plus jitter.
	Backoff time.Duration
	// MaxDispatchAttempts: once the row's dispatch attempts reach it, the
	// row is dead-lettered instead. Defaults to MaxDispatchAttemptsDefault.
	MaxDispatchAttempts int32
	// LastError is the publish error, cut to 4,096 characters.
	LastError string
}

// ReleaseOutbox records a failed publication: the row backs off (pending,
// due after Backoff) or, with its dispatch attempts used up, is
// dead-lettered and its attempt fails with OUTBOX_DEAD, in one statement.
// The returned row's Status says which.
//
// Only an attempt waiting for a delivery (dispatch_pending, retry_wait,
// queued, or running with an expired lease) is dead-lettered or backed
// off. When the attempt is running under a lease that is live by this
// call's clock (the claim's clock saw it expired: the release runs in a
// transaction begun earlier, or its clock is behind the claim's), the row
// goes back to that lease instead: Status leased, due at the lease's
// expiry, LastError recorded, the attempt untouched. Its worker keeps the
// lease, and the relay redelivers at the expiry if the worker is lost.
//
// Errors: *InputError, ErrOutboxLockLost.
func (r *Repo) ReleaseOutbox(ctx context.Context, db DBTX, p *ReleaseOutboxParams) (*kfstype.OutboxMessage, error) {
	v := r.call(ctx, db)
	if set(v, "ReleaseOutboxParams", p) {
		v.uuid("OutboxID", p.OutboxID)
		v.uuid("LockToken", p.LockToken)
		v.duration("Backoff", p.Backoff)
		if p.MaxDispatchAttempts < 0 {
			v.fail("MaxDispatchAttempts", "must be > 0 (or 0 for the default)")
		}
		if p.LastError == "" {
			v.fail("LastError", "must not be empty")
		}
	}
	if err := v.result(); err != nil {
		return nil, err
	}
	maxAttempts := p.MaxDispatchAttempts
	if maxAttempts == 0 {
		maxAttempts = MaxDispatchAttemptsDefault
	}
	row, err := r.q.ReleaseOutbox(ctx, db, &gen.ReleaseOutboxParams{
		Now: r.now(), Backoff: p.Backoff, LastError: TruncateMessage(p.LastError),
		OutboxID: p.OutboxID, MaxDispatchAttempts: maxAttempts, LockToken: p.LockToken,
	})
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, fmt.Errorf("release outbox row %s: %w", p.OutboxID, ErrOutboxLockLost)
	}
	if err != nil {
		return nil, fmt.Errorf("release outbox row %s: %w", p.OutboxID, mapError(err))
	}
	return outboxFromRow(row), nil
}

// DecodePayload parses an outbox payload, which must be exactly
// {"attemptId":"<uuid>"} with a non-zero UUID.
//
// Errors: *InputError.
func DecodePayload(raw []byte) (*kfstype.Payload, error) {
	return decodePayload(raw)
}

func decodePayload(raw []byte) (*kfstype.Payload, error) {
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(raw, &fields); err != nil || fields == nil {
		return nil, &InputError{Field: "Payload", Reason: "must be a JSON object"}
	}
	if len(fields) != 1 || fields["attemptId"] == nil {
		return nil, &InputError{Field: "Payload", Reason: `must hold exactly the key "attemptId"`}
	}
	var s string
	if err := json.Unmarshal(fields["attemptId"], &s); err != nil {
		return nil, &InputError{Field: "Payload.attemptId", Reason: "must be a string"}
	}
	id, err := uuid.Parse(s)
	if err != nil || id == uuid.Nil || len(s) != 36 {
		return nil, &InputError{Field: "Payload.attemptId", Reason: "must be a non-zero UUID in canonical form"}
	}
	// Reject duplicate keys, which map decoding would silently merge.
	if bytes.Count(raw, []byte(`"attemptId"`)) != 1 {
		return nil, &InputError{Field: "Payload", Reason: `must hold "attemptId" once`}
	}
	return &kfstype.Payload{AttemptID: id}, nil
}
