// Package repo persists document compilation attempts and their outbox rows.
//
// Each exported method is one transition of the compilation state machine
// (see the state diagram in docs/ADOPTING.md) and runs as one SQL statement, so it is
// atomic on its own and composes into a caller's transaction: pass a
// *pgxpool.Pool, a *pgx.Conn or a pgx.Tx as the DBTX. Every precondition is
// a guard in the statement's WHERE; a refused transition changes nothing and
// returns one of the sentinel errors in errors.go (a second, read-only
// statement reads the row to say which). Statements lock an attempt before
// its outbox row.
//
// Every exported method has one shape, (ctx, db, *<Method>Params), and
// bears the name of the statement it runs (db/gen's method of the same
// name, from the query of that name in db/queries). Each query file has
// its Go twin here, the methods in the file's order: start.go (Start,
// StartMany), control.go (ReleaseDeferred, Cancel, Supersede,
// RetryFailed), purge.go (Purge, PurgeTenants), lease.go (AcquireLease,
// FailExhausted), worker.go (Heartbeat to CompleteMany),
// direct_delivery.go (FetchLeases), outbox_relay.go (ClaimOutbox to
// ReleaseOutbox), operator.go (ListAttempts to Throughput; ListStuck in
// operator_stuck.go), reads.go (GetAttempt to HeadRevision, and the read
// that explains a refusal) and tenant_limits.go. errors.go, validate.go,
// pgxtypes.go and this file hold what they share; plan_class.go,
// FetchLeases' plan per size class.
//
// Inputs are validated before any round trip; outputs are kfstype values,
// never generated rows. A Repo is safe for concurrent use.
//
// Who owns what: kfsdb owns the attempts and their outbox rows; the
// knowledge spaces, document assets, projection set publications and
// publication heads are the platform's, and repo only reads them. A Start
// carries the space's head revision ([Repo.HeadRevision]); after
// [Repo.Complete] the platform promotes the bound candidate and bumps the
// head.
//
// Runnable examples against a real database (Start, Start in the caller's
// transaction, a worker on pgsource, Cancel, RetryFailed) are in package
// [github.com/knowledgefs/kfsdb/kfsdbtest], the test kit, whose module
// brings the database they need; this module cannot require it without
// putting testcontainers in every importer's graph.
package repo

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/knowledgefs/kfsdb/db/gen"
	"github.com/knowledgefs/kfsdb/kfstype"
)

// DBTX is what every method runs on: a *pgxpool.Pool, a *pgx.Conn or a
// pgx.Tx.
type DBTX interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// Clock supplies the "now" every statement uses. NowOrNil returns nil in
// production, so the database's now() is the only clock; tests return a
// fixed time to move time without sleeping.
type Clock interface {
	NowOrNil() *time.Time
}

// Config configures a Repo.
type Config struct {
	// Clock overrides the database clock. Defaults to nil: every statement
	// uses the database's now().
	Clock Clock
	// AsyncProgressCommits makes the transitions that record progress
	// rather than an outcome (ClaimOutbox, MarkDispatched, AcquireLease,
	// Heartbeat, Advance, AdvanceTo) commit asynchronously: their
	// transaction sets synchronous_commit = off for itself, so its commit
	// does not wait for the WAL flush (PostgreSQL's walwriter flushes it
	// within wal_writer_delay, and any later synchronous commit flushes it
	// first). A database crash can then forget the last such writes; each
	// is redone as if its relay or worker had been lost (a claim or lease
	// that was never taken, a checkpoint to redo), which at-least-once
	// delivery already handles, at the price of a repeated publication or
	// execution (and an execution attempt not counted). Start and every
	// outcome (Complete, Fail, ScheduleRetry, Cancel, …) stay synchronous.
	// Called inside a caller's transaction, these transitions make that
	// whole transaction's commit asynchronous. Defaults to false.
	AsyncProgressCommits bool
}

// Repo runs the state machine's transitions. The zero value is not usable;
// call New.
type Repo struct {
	clock         Clock
	asyncProgress bool
	q             *gen.Queries
	// plans: the tables' size class for FetchLeases (plan_class.go).
	plans planClass
}

// New returns a Repo. A nil config means defaults.
func New(cfg *Config) *Repo {
	r := &Repo{q: gen.New()}
	if cfg != nil {
		r.clock, r.asyncProgress = cfg.Clock, cfg.AsyncProgressCommits
	}
	return r
}

// now is the override passed to every statement: nil means now().
func (r *Repo) now() *time.Time {
	if r.clock == nil {
		return nil
	}
	return r.clock.NowOrNil()
}

// availableAt converts a stored outbox available_at, where 'infinity'
// (a deferred start) becomes kfstype.Forever.
func availableAt(ts pgtype.Timestamptz) time.Time {
	if ts.InfinityModifier == pgtype.Infinity {
		return kfstype.Forever
	}
	return ts.Time.UTC()
}

func utc(t time.Time) time.Time { return t.UTC() }

func utcPtr(t *time.Time) *time.Time {
	if t == nil {
		return nil
	}
	u := t.UTC()
	return &u
}

func attemptFromRow(a *gen.DocumentCompilationAttempt) *kfstype.Attempt {
	return &kfstype.Attempt{
		ID:                      a.ID,
		TenantID:                a.TenantID,
		KnowledgeSpaceID:        a.KnowledgeSpaceID,
		DocumentAssetID:         a.DocumentAssetID,
		DocumentVersion:         a.DocumentVersion,
		PublicationGenerationID: a.PublicationGenerationID,
		BaseHeadRevision:        a.BaseHeadRevision,
		CandidatePublicationID:  a.CandidatePublicationID,
		CandidateFingerprint:    a.CandidateFingerprint,
		Checkpoint:              a.Checkpoint,
		RunState:                a.RunState,
		Active:                  a.ActiveSlot != nil,
		ExecutionAttempts:       a.ExecutionAttempts,
		MaxExecutionAttempts:    a.MaxExecutionAttempts,
		QueueJobID:              a.QueueJobID,
		ExternalJobID:           a.ExternalJobID,
		WorkerID:                a.WorkerID,
		LeaseToken:              a.LeaseToken,
		LeaseExpiresAt:          utcPtr(a.LeaseExpiresAt),
		HeartbeatAt:             utcPtr(a.HeartbeatAt),
		RetryAt:                 utcPtr(a.RetryAt),
		LastErrorCode:           a.LastErrorCode,
		LastErrorMessage:        a.LastErrorMessage,
		RowVersion:              a.RowVersion,
		CreatedAt:               utc(a.CreatedAt),
		UpdatedAt:               utc(a.UpdatedAt),
		StartedAt:               utcPtr(a.StartedAt),
		CompletedAt:             utcPtr(a.CompletedAt),
	}
}

func outboxFromRow(o *gen.DocumentCompilationOutbox) *kfstype.OutboxMessage {
	return &kfstype.OutboxMessage{
		ID:               o.ID,
		AttemptID:        o.AttemptID,
		EventType:        o.EventType,
		SchemaVersion:    o.SchemaVersion,
		Payload:          o.Payload,
		IdempotencyKey:   o.IdempotencyKey,
		Status:           o.Status,
		DispatchAttempts: o.DispatchAttempts,
		AvailableAt:      availableAt(o.AvailableAt),
		LockedBy:         o.LockedBy,
		LockToken:        o.LockToken,
		LockedUntil:      utcPtr(o.LockedUntil),
		QueueJobID:       o.QueueJobID,
		ExternalJobID:    o.ExternalJobID,
		DeliveredAt:      utcPtr(o.DeliveredAt),
		LastError:        o.LastError,
		CreatedAt:        utc(o.CreatedAt),
		UpdatedAt:        utc(o.UpdatedAt),
	}
}
