// Package partition holds what the partition tests and their program,
// tests/cmd/kfsdb-partition, share: the events the program prints, one
// JSON object per line on stdout, which the tests read from the
// container's logs.
//
// The tests (partition_test) run a worker or a relay of kfsdb in a
// container of its own on a Docker network with PostgreSQL, cut it off
// from the database for longer than its lease or claim, let a second
// worker or relay take over, bring the route back and check that every
// late write of the cut-off one was refused by fencing.
package partition

import (
	"time"

	"github.com/google/uuid"
)

// Event kinds.
const (
	// EventRunning: the worker's handler started on Attempt under Token,
	// expiring at ExpiresAt.
	EventRunning = "running"
	// EventContextEnded: the handler's context ended At, with Cause; the
	// lease it last held (Token) expired at ExpiresAt.
	EventContextEnded = "context_ended"
	// EventProcessed: the worker settled the delivery with Outcome.
	EventProcessed = "processed"
	// EventLateWrite: a write (Write: heartbeat, progress, outcome) under a
	// lease the worker no longer holds; Refused when the database refused
	// it as fencing should (repo.ErrLeaseLost), Err otherwise.
	EventLateWrite = "late_write"
	// EventPublishing: the relay claimed OutboxID (its claim's LockToken)
	// and its publisher is holding the publication until the gate opens.
	EventPublishing = "publishing"
	// EventPublished: the held publication returned QueueJobID.
	EventPublished = "published"
	// EventReport: the program's counters after its late writes (it works
	// on).
	EventReport = "report"
)

// Late writes a cut-off worker makes.
const (
	WriteHeartbeat = "heartbeat"
	WriteProgress  = "progress"
	WriteOutcome   = "outcome"
)

// Event is one line of the program's output.
type Event struct {
	Event     string           `json:"event"`
	At        time.Time        `json:"at"`
	Attempt   uuid.UUID        `json:"attempt,omitzero"`
	Token     uuid.UUID        `json:"token,omitzero"`
	ExpiresAt time.Time        `json:"expires_at,omitzero"`
	Cause     string           `json:"cause,omitempty"`
	Outcome   string           `json:"outcome,omitempty"`
	Write     string           `json:"write,omitempty"`
	Refused   bool             `json:"refused,omitempty"`
	Err       string           `json:"err,omitempty"`
	OutboxID  uuid.UUID        `json:"outbox_id,omitzero"`
	LockToken uuid.UUID        `json:"lock_token,omitzero"`
	JobID     string           `json:"job_id,omitempty"`
	Counts    map[string]int64 `json:"counts,omitempty"`
}

// Gate is the signal that opens the program's gate (the route is back):
// the test sends it with `docker kill --signal`, which needs no network.
const Gate = "SIGUSR1"
