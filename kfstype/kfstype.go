// Package kfstype holds kfsdb's public domain types: the states an attempt
// and its outbox row move through, and the rows themselves as the module
// returns them. It imports nothing from kfsdb, so every other package
// (generated queries, repo, relay, worker) can depend on it.
package kfstype

import (
	"encoding/json"
	"time"

	"github.com/google/uuid"
)

// RunState is the run state of a compilation attempt
// (document_compilation_attempts.run_state).
type RunState string

const (
	// RunStateDispatchPending: Start and RetryFailed put an attempt here;
	// MarkDispatched moves it to queued once the relay published it.
	RunStateDispatchPending RunState = "dispatch_pending"
	// RunStateQueued: published to the queue; AcquireLease moves it to running.
	RunStateQueued RunState = "queued"
	// RunStateRunning: a worker holds the lease. Complete, Fail and
	// ScheduleRetry move it on; an expired lease may be re-acquired.
	RunStateRunning RunState = "running"
	// RunStateRetryWait: ScheduleRetry parked it until retry_at; the relay
	// republishes it then.
	RunStateRetryWait RunState = "retry_wait"
	// RunStateSucceeded is terminal: Complete, with checkpoint published.
	RunStateSucceeded RunState = "succeeded"
	// RunStateFailed is terminal (Fail, FailExhausted, a dead-lettered
	// outbox row) until RetryFailed reactivates it.
	RunStateFailed RunState = "failed"
	// RunStateCanceled is terminal: Cancel.
	RunStateCanceled RunState = "canceled"
	// RunStateSuperseded is terminal: Supersede.
	RunStateSuperseded RunState = "superseded"
)

// RunStates returns every run state, live ones first.
func RunStates() []RunState {
	return []RunState{
		RunStateDispatchPending, RunStateQueued, RunStateRunning, RunStateRetryWait,
		RunStateSucceeded, RunStateFailed, RunStateCanceled, RunStateSuperseded,
	}
}

// Live reports whether an attempt in this state holds the document
// version's active slot.
func (s RunState) Live() bool {
	switch s {
	case RunStateDispatchPending, RunStateQueued, RunStateRunning, RunStateRetryWait:
		return true
	}
	return false
}

// Terminal reports whether the state is final (only RetryFailed leaves
// failed).
func (s RunState) Terminal() bool {
	switch s {
	case RunStateSucceeded, RunStateFailed, RunStateCanceled, RunStateSuperseded:
		return true
	}
	return false
}

// Checkpoint is how far a compilation got
// (document_compilation_attempts.checkpoint). Checkpoints advance one step
// at a time and never go back.
type Checkpoint string

const (
	// CheckpointQueued: where Start puts a new attempt; nothing is done
	// yet. RetryFailed keeps the checkpoint reached, so a retried attempt
	// resumes rather than starting here again.
	CheckpointQueued Checkpoint = "queued"
	// CheckpointParsed: the document was parsed. Set by the lease holder
	// through Advance or AdvanceTo (worker: job.Advance, job.AdvanceTo).
	CheckpointParsed Checkpoint = "parsed"
	// CheckpointOutlineBuilt: the outline was built (Advance, AdvanceTo).
	CheckpointOutlineBuilt Checkpoint = "outline_built"
	// CheckpointNodesGenerated: the nodes were generated (Advance,
	// AdvanceTo).
	CheckpointNodesGenerated Checkpoint = "nodes_generated"
	// CheckpointProjectionBuilt: the projection set was built. From here on
	// a candidate publication must be bound (CandidatePublicationID and
	// CandidateFingerprint): given with the write that reaches it (worker:
	// job.BindCandidate) or bound earlier.
	CheckpointProjectionBuilt Checkpoint = "projection_built"
	// CheckpointSmokeEvalPassed: the candidate passed its smoke evaluation;
	// the last checkpoint Advance and AdvanceTo reach, and the one
	// Complete requires.
	CheckpointSmokeEvalPassed Checkpoint = "smoke_eval_passed"
	// CheckpointPublished: set only by Complete, CompleteThrough and
	// CompleteMany, together with run state succeeded; never by Advance.
	CheckpointPublished Checkpoint = "published"
)

// Checkpoints returns every checkpoint in order.
func Checkpoints() []Checkpoint {
	return []Checkpoint{
		CheckpointQueued, CheckpointParsed, CheckpointOutlineBuilt, CheckpointNodesGenerated,
		CheckpointProjectionBuilt, CheckpointSmokeEvalPassed, CheckpointPublished,
	}
}

// Rank is the checkpoint's position in [Checkpoints], or -1 for an unknown
// value.
func (c Checkpoint) Rank() int {
	for i, v := range Checkpoints() {
		if v == c {
			return i
		}
	}
	return -1
}

// NeedsCandidate reports whether an attempt at this checkpoint must have a
// candidate publication bound (projection_built and later).
func (c Checkpoint) NeedsCandidate() bool {
	return c.Rank() >= CheckpointProjectionBuilt.Rank()
}

// OutboxStatus is the status of an attempt's outbox row
// (document_compilation_outbox.status).
type OutboxStatus string

const (
	// OutboxStatusPending: due for publication at available_at (Start,
	// ReleaseOutbox backing off, ScheduleRetry, RetryFailed).
	OutboxStatusPending OutboxStatus = "pending"
	// OutboxStatusDispatching: claimed by a relay (ClaimOutbox) until
	// locked_until; an expired lock is claimed again.
	OutboxStatusDispatching OutboxStatus = "dispatching"
	// OutboxStatusDispatched: published (MarkDispatched); available_at is
	// the visibility deadline after which it is republished.
	OutboxStatusDispatched OutboxStatus = "dispatched"
	// OutboxStatusLeased: a worker holds the attempt's lease (AcquireLease);
	// available_at follows the lease expiry, so a lost worker is redelivered.
	OutboxStatusLeased OutboxStatus = "leased"
	// OutboxStatusCompleted is terminal: the attempt succeeded.
	OutboxStatusCompleted OutboxStatus = "completed"
	// OutboxStatusCanceled is terminal: the attempt was canceled or superseded.
	OutboxStatusCanceled OutboxStatus = "canceled"
	// OutboxStatusDead is terminal: the attempt failed.
	OutboxStatusDead OutboxStatus = "dead"
)

// OutboxStatuses returns every outbox status.
func OutboxStatuses() []OutboxStatus {
	return []OutboxStatus{
		OutboxStatusPending, OutboxStatusDispatching, OutboxStatusDispatched, OutboxStatusLeased,
		OutboxStatusCompleted, OutboxStatusCanceled, OutboxStatusDead,
	}
}

// Error codes written to last_error_code by the module itself.
const (
	ErrorCodeCanceled                   = "CANCELED"
	ErrorCodeSuperseded                 = "SUPERSEDED"
	ErrorCodeOutboxDead                 = "OUTBOX_DEAD"
	ErrorCodeExecutionAttemptsExhausted = "EXECUTION_ATTEMPTS_EXHAUSTED"
	ErrorCodeCompilationFailed          = "DOCUMENT_COMPILATION_FAILED"
	ErrorCodeCompilationRetryable       = "DOCUMENT_COMPILATION_RETRYABLE"
	ErrorCodeHandlerPanic               = "DOCUMENT_COMPILATION_PANIC"
)

// The only event the outbox carries, and its schema version.
const (
	EventTypeDocumentCompile = "document.compile"
	EventSchemaVersion       = 1
)

// Forever is OutboxMessage.AvailableAt of a deferred start's outbox row,
// which the database stores as 'infinity'.
var Forever = time.Date(9999, 12, 31, 23, 59, 59, 0, time.UTC)

// Attempt is one logical compilation of one document version
// (a document_compilation_attempts row). Times are UTC.
type Attempt struct {
	// ID is the attempt's id, a UUIDv7 Start generates; it never changes,
	// RetryFailed reactivates the same row.
	ID uuid.UUID
	// TenantID scopes the attempt (1..255 characters): every control-plane
	// call names it, and another tenant's attempt is not found.
	TenantID string
	// KnowledgeSpaceID is the knowledge space of TenantID the document
	// belongs to.
	KnowledgeSpaceID uuid.UUID
	// DocumentAssetID and DocumentVersion name the document version
	// compiled; at most one attempt per version is live (Active).
	DocumentAssetID uuid.UUID
	// DocumentVersion is the asset's version compiled (> 0).
	DocumentVersion int32
	// PublicationGenerationID is the caller's generation id, given to
	// Start and stored as is.
	PublicationGenerationID uuid.UUID
	// BaseHeadRevision is the space's publication head revision Start was
	// given (and checked against; 0 when the space had none).
	BaseHeadRevision int32
	// CandidatePublicationID and CandidateFingerprint are the candidate
	// projection set publication, both set or both nil. Nil until the
	// lease holder binds one (Advance, AdvanceTo, CompleteThrough); bound
	// once, then immutable, and kept by RetryFailed. Required from
	// CheckpointProjectionBuilt on.
	CandidatePublicationID *uuid.UUID
	// CandidateFingerprint is the bound candidate's fingerprint
	// (projection-set-sha256: and 64 lowercase hex digits); set with
	// CandidatePublicationID.
	CandidateFingerprint *string
	// Checkpoint is how far the compilation got: CheckpointQueued at Start,
	// moved forward by the lease holder, CheckpointPublished on success.
	Checkpoint Checkpoint
	// RunState is where the attempt is in the state machine; see RunState's
	// constants for who moves it.
	RunState RunState
	// Active is true while the attempt holds the document version's live
	// slot (active_slot = 1): from Start (or RetryFailed) until it reaches
	// a terminal RunState, which sets active_slot NULL.
	Active bool
	// ExecutionAttempts counts AcquireLease calls that took the lease, this
	// execution included; RetryFailed resets it to 0.
	ExecutionAttempts int32
	// MaxExecutionAttempts bounds ExecutionAttempts (StartParams'; 5,
	// repo.MaxExecutionAttemptsDefault, by
	// default): AcquireLease refuses with it reached, and FailExhausted
	// then fails the attempt.
	MaxExecutionAttempts int32
	// QueueJobID and ExternalJobID are the queue's ids of the current
	// publication, copied by MarkDispatched; a delivery must present them
	// to AcquireLease. Nil before the first publication and after
	// ScheduleRetry or RetryFailed, which clear them.
	QueueJobID *string
	// ExternalJobID is the queue's optional second id of the current
	// publication; a delivery that presents one must match it.
	ExternalJobID *string
	// WorkerID, LeaseToken and LeaseExpiresAt are the lease: set by
	// AcquireLease (a fresh random token), LeaseExpiresAt extended by
	// Heartbeat. Nil unless the attempt is running; every transition out
	// of running clears them.
	WorkerID *string
	// LeaseToken is the lease's random token; every lease-fenced call
	// presents it.
	LeaseToken *uuid.UUID
	// LeaseExpiresAt is when the lease lapses unless a Heartbeat extends
	// it; past it, another delivery may take the attempt over.
	LeaseExpiresAt *time.Time
	// HeartbeatAt is the lease's last AcquireLease or Heartbeat; nil when
	// the attempt is not running.
	HeartbeatAt *time.Time
	// RetryAt is when a retry_wait attempt is published again
	// (ScheduleRetry); nil in every other run state.
	RetryAt *time.Time
	// LastErrorCode and LastErrorMessage are the last recorded error
	// (Fail, FailExhausted, ScheduleRetry, a dead-lettered outbox row, or
	// Cancel and Supersede with a reason); nil until one is recorded, and
	// cleared by RetryFailed. The code is 1..64 characters, the message at
	// most 4,096.
	LastErrorCode *string
	// LastErrorMessage is the last recorded error's message, with
	// LastErrorCode.
	LastErrorMessage *string
	// RowVersion starts at 0 and grows by one with every write; control
	// calls can require it (AttemptRef.ExpectedRowVersion).
	RowVersion int32
	// CreatedAt is Start's time.
	CreatedAt time.Time
	// UpdatedAt is the last write's time.
	UpdatedAt time.Time
	// StartedAt is the first AcquireLease's time; nil until then, and
	// cleared by RetryFailed.
	StartedAt *time.Time
	// CompletedAt is when the attempt became terminal; nil while it is
	// live (RetryFailed clears it).
	CompletedAt *time.Time
}

// OutboxMessage is an attempt's queue publication
// (a document_compilation_outbox row). Times are UTC.
type OutboxMessage struct {
	// ID is the row's id, a UUIDv7 Start generates.
	ID uuid.UUID
	// AttemptID is the attempt the row publishes; one row per attempt.
	AttemptID uuid.UUID
	// EventType is "document.compile".
	EventType string
	// SchemaVersion is the payload's schema version, 1.
	SchemaVersion int32
	// Payload is exactly {"attemptId":"<uuid>"} (DecodePayload in repo
	// reads it).
	Payload json.RawMessage
	// IdempotencyKey is "document.compile:<attemptId>", for a broker that
	// drops duplicate publications.
	IdempotencyKey string
	// Status is where the row is in its cycle; see OutboxStatus's
	// constants for who moves it.
	Status OutboxStatus
	// DispatchAttempts counts the row's claims (ClaimOutbox and
	// FetchLeases add one) since Start, ScheduleRetry or RetryFailed set
	// it to 0; ReleaseOutbox dead-letters the row once it reaches the
	// relay's maximum.
	DispatchAttempts int32
	// AvailableAt is when the relay may (re)publish the row; Forever while
	// a deferred start waits for ReleaseDeferred.
	AvailableAt time.Time
	// LockedBy is the relay that claimed the row (ClaimOutbox); nil
	// unless the row is dispatching.
	LockedBy *string
	// LockToken is the claim's random token, which MarkDispatched and
	// ReleaseOutbox present; nil unless the row is dispatching.
	LockToken *uuid.UUID
	// LockedUntil is when the claim lapses and another relay may recover
	// the row; nil unless the row is dispatching.
	LockedUntil *time.Time
	// QueueJobID is the queue's id of the last publication
	// (MarkDispatched, or FetchLeases' "pg:…" id); nil before one, and
	// after ScheduleRetry or RetryFailed.
	QueueJobID *string
	// ExternalJobID is the queue's optional second id of the last
	// publication.
	ExternalJobID *string
	// DeliveredAt is when the last publication was recorded; nil before
	// one.
	DeliveredAt *time.Time
	// LastError is the last failed publication's error (ReleaseOutbox);
	// nil until one, cleared by RetryFailed.
	LastError *string
	// CreatedAt is Start's time.
	CreatedAt time.Time
	// UpdatedAt is the last write's time.
	UpdatedAt time.Time
}

// Payload is the decoded outbox payload: exactly {"attemptId":"<uuid>"}.
type Payload struct {
	// AttemptID is the attempt to run (a non-zero UUID).
	AttemptID uuid.UUID `json:"attemptId"`
}

// TraceContext is a W3C Trace Context in its text form, as carried from
// an attempt's Start to the worker that runs it (adapters/otel writes and
// reads it): the outbox payload is fixed, so it travels beside it. The
// zero value is "no trace context".
type TraceContext struct {
	// TraceParent is "version-traceid-parentid-flags" in lowercase hex
	// (55 characters for version 00).
	TraceParent string
	// TraceState is the vendor list, "" when there is none; at most 512
	// characters.
	TraceState string
}

// IsZero reports whether tc carries no trace context.
func (tc TraceContext) IsZero() bool { return tc.TraceParent == "" }
