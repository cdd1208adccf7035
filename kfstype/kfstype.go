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
	CheckpointQueued          Checkpoint = "queued"
	CheckpointParsed          Checkpoint = "parsed"
	CheckpointOutlineBuilt    Checkpoint = "outline_built"
	CheckpointNodesGenerated  Checkpoint = "nodes_generated"
	CheckpointProjectionBuilt Checkpoint = "projection_built"
	CheckpointSmokeEvalPassed Checkpoint = "smoke_eval_passed"
	CheckpointPublished       Checkpoint = "published"
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
	ID                      uuid.UUID
	TenantID                string
	KnowledgeSpaceID        uuid.UUID
	DocumentAssetID         uuid.UUID
	DocumentVersion         int32
	PublicationGenerationID uuid.UUID
	BaseHeadRevision        int32
	CandidatePublicationID  *uuid.UUID
	CandidateFingerprint    *string
	Checkpoint              Checkpoint
	RunState                RunState
	// Active is true while the attempt holds the document version's live
	// slot (active_slot = 1).
	Active               bool
	ExecutionAttempts    int32
	MaxExecutionAttempts int32
	QueueJobID           *string
	ExternalJobID        *string
	WorkerID             *string
	LeaseToken           *uuid.UUID
	LeaseExpiresAt       *time.Time
	HeartbeatAt          *time.Time
	RetryAt              *time.Time
	LastErrorCode        *string
	LastErrorMessage     *string
	RowVersion           int32
	CreatedAt            time.Time
	UpdatedAt            time.Time
	StartedAt            *time.Time
	CompletedAt          *time.Time
}

// OutboxMessage is an attempt's queue publication
// (a document_compilation_outbox row). Times are UTC.
type OutboxMessage struct {
	ID               uuid.UUID
	AttemptID        uuid.UUID
	EventType        string
	SchemaVersion    int32
	Payload          json.RawMessage
	IdempotencyKey   string
	Status           OutboxStatus
	DispatchAttempts int32
	// AvailableAt is when the relay may (re)publish the row; Forever while
	// a deferred start waits for ReleaseDeferred.
	AvailableAt   time.Time
	LockedBy      *string
	LockToken     *uuid.UUID
	LockedUntil   *time.Time
	QueueJobID    *string
	ExternalJobID *string
	DeliveredAt   *time.Time
	LastError     *string
	CreatedAt     time.Time
	UpdatedAt     time.Time
}

// Payload is the decoded outbox payload: exactly {"attemptId":"<uuid>"}.
type Payload struct {
	AttemptID uuid.UUID `json:"attemptId"`
}
