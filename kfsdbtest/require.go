package kfsdbtest

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/google/uuid"

	"github.com/knowledgefs/kfsdb/kfstype"
	"github.com/knowledgefs/kfsdb/repo"
)

// AttemptWant is what [DB.RequireAttempt] checks; zero fields are not
// checked.
type AttemptWant struct {
	RunState   kfstype.RunState
	Checkpoint kfstype.Checkpoint
	// ErrorCode is the last error code (worker.Fatal's code,
	// DOCUMENT_COMPILATION_RETRYABLE, EXECUTION_ATTEMPTS_EXHAUSTED, …).
	ErrorCode string
	// ExecutionAttempts is how many times the attempt was leased.
	ExecutionAttempts int32
	// Candidate is the publication bound at projection_built.
	Candidate uuid.UUID
}

// OutboxWant is what [DB.RequireOutbox] checks; zero fields are not
// checked.
type OutboxWant struct {
	Status kfstype.OutboxStatus
	// DispatchAttempts counts publications to a broker and direct-delivery
	// fetches of the row.
	DispatchAttempts int32
}

// RequireAttempt reads attempt id and fails the test now, naming every
// mismatch, unless it is as want says. It returns the attempt.
func (db *DB) RequireAttempt(t testing.TB, id uuid.UUID, want AttemptWant) *kfstype.Attempt {
	t.Helper()
	a, _ := db.read(t, id)
	var bad []string
	check := func(field string, skip bool, got, want any) {
		if !skip && got != want {
			bad = append(bad, fmt.Sprintf("%s is %v, want %v", field, got, want))
		}
	}
	check("run_state", want.RunState == "", a.RunState, want.RunState)
	check("checkpoint", want.Checkpoint == "", a.Checkpoint, want.Checkpoint)
	check("last_error_code", want.ErrorCode == "", deref(a.LastErrorCode), want.ErrorCode)
	check("execution_attempts", want.ExecutionAttempts == 0, a.ExecutionAttempts, want.ExecutionAttempts)
	var cand uuid.UUID
	if a.CandidatePublicationID != nil {
		cand = *a.CandidatePublicationID
	}
	check("candidate_publication_id", want.Candidate == uuid.Nil, cand, want.Candidate)
	fail(t, "attempt", id, a.LastErrorMessage, bad)
	return a
}

// RequireOutbox reads the outbox row of attempt attemptID and fails the
// test now, naming every mismatch, unless it is as want says. It returns
// the row.
func (db *DB) RequireOutbox(t testing.TB, attemptID uuid.UUID, want OutboxWant) *kfstype.OutboxMessage {
	t.Helper()
	_, o := db.read(t, attemptID)
	var bad []string
	if want.Status != "" && o.Status != want.Status {
		bad = append(bad, fmt.Sprintf("status is %s, want %s", o.Status, want.Status))
	}
	if want.DispatchAttempts != 0 && o.DispatchAttempts != want.DispatchAttempts {
		bad = append(bad, fmt.Sprintf("dispatch_attempts is %d, want %d", o.DispatchAttempts, want.DispatchAttempts))
	}
	fail(t, "outbox row of attempt", attemptID, o.LastError, bad)
	return o
}

// read reads an attempt of any tenant with its outbox row.
func (db *DB) read(t testing.TB, id uuid.UUID) (*kfstype.Attempt, *kfstype.OutboxMessage) {
	t.Helper()
	ctx := context.Background()
	var tenant string
	if err := db.Pool.QueryRow(ctx, `SELECT tenant_id FROM document_compilation_attempts WHERE id = $1`, id).Scan(&tenant); err != nil {
		t.Fatalf("kfsdbtest: attempt %s: %v", id, err)
	}
	a, o, err := db.Repo.GetAttemptWithOutbox(ctx, db.Pool, &repo.GetAttemptWithOutboxParams{TenantID: tenant, AttemptID: id})
	must(t, err)
	return a, o
}

func fail(t testing.TB, what string, id uuid.UUID, lastError *string, bad []string) {
	t.Helper()
	if len(bad) == 0 {
		return
	}
	msg := fmt.Sprintf("%s %s: %s", what, id, strings.Join(bad, "; "))
	if lastError != nil {
		msg += fmt.Sprintf(" (last error: %q)", *lastError)
	}
	t.Fatal(msg)
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}
