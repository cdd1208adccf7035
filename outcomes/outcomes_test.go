package outcomes_test

import (
	"context"
	"errors"
	"testing"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/knowledgefs/kfsdb/kfstype"
	"github.com/knowledgefs/kfsdb/outcomes"
	"github.com/knowledgefs/kfsdb/repo"
)

// TestParse reads the trigger's payloads (json_build_object's text, a null
// error code among them) and refuses what is not one, with a
// *PayloadError. Mutation: accepting a non-terminal run state.
func TestParse(t *testing.T) {
	t.Parallel()
	id := uuid.MustParse("0190e3a4-7f1c-7b8a-9d2e-4c5b6a7f8e9d")
	for _, c := range []struct {
		payload string
		want    outcomes.Outcome
	}{
		{`{"attempt_id" : "0190e3a4-7f1c-7b8a-9d2e-4c5b6a7f8e9d", "tenant_id" : "acme|eu", "run_state" : "failed", "error_code" : "PDF_ENCRYPTED"}`,
			outcomes.Outcome{AttemptID: id, TenantID: "acme|eu", RunState: kfstype.RunStateFailed, ErrorCode: "PDF_ENCRYPTED"}},
		{`{"attempt_id" : "0190e3a4-7f1c-7b8a-9d2e-4c5b6a7f8e9d", "tenant_id" : "acme", "run_state" : "succeeded", "error_code" : null}`,
			outcomes.Outcome{AttemptID: id, TenantID: "acme", RunState: kfstype.RunStateSucceeded}},
	} {
		got, err := outcomes.Parse(c.payload)
		if err != nil || got != c.want {
			t.Fatalf("Parse(%s) = %+v, %v; want %+v", c.payload, got, err, c.want)
		}
	}
	for _, bad := range []string{
		``, `not json`, `2026-12-06 21:00:00+00|worker-1`, `{}`,
		`{"attempt_id": "00000000-0000-0000-0000-000000000000", "tenant_id": "acme", "run_state": "failed"}`,
		`{"attempt_id": "0190e3a4-7f1c-7b8a-9d2e-4c5b6a7f8e9d", "run_state": "failed"}`,
		`{"attempt_id": "0190e3a4-7f1c-7b8a-9d2e-4c5b6a7f8e9d", "tenant_id": "acme", "run_state": "running"}`,
		`{"attempt_id": "0190e3a4-7f1c-7b8a-9d2e-4c5b6a7f8e9d", "tenant_id": "acme"}`,
	} {
		_, err := outcomes.Parse(bad)
		var pe *outcomes.PayloadError
		if !errors.As(err, &pe) || pe.Payload != bad {
			t.Fatalf("Parse(%q) = %v, want a *PayloadError", bad, err)
		}
	}
}

// TestRefusesNilArguments: bad arguments are refused before any round
// trip, with a *repo.InputError naming them.
func TestRefusesNilArguments(t *testing.T) {
	t.Parallel()
	var nilCtx context.Context
	// Never connected: Listen refuses the nil handle before it dials.
	pool, err := pgxpool.New(context.Background(), "postgres://127.0.0.1:1/none")
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	for name, err := range map[string]error{
		"Enable nil db":     outcomes.Enable(context.Background(), nil, 0),
		"Enable nil ctx":    outcomes.Enable(nilCtx, nil, 0),
		"Disable negative":  outcomes.Disable(context.Background(), nopDB{}, -1),
		"Listen nil pool":   outcomes.Listen(context.Background(), nil, func(outcomes.Outcome) {}, nil),
		"Listen nil handle": outcomes.Listen(context.Background(), pool, nil, nil),
	} {
		if !errors.Is(err, repo.ErrInvalidInput) {
			t.Errorf("%s: %v, want repo.ErrInvalidInput", name, err)
		}
	}
	if _, err := outcomes.Enabled(context.Background(), nil); !errors.Is(err, repo.ErrInvalidInput) {
		t.Errorf("Enabled nil db: %v, want repo.ErrInvalidInput", err)
	}
}

// nopDB is a repo.DBTX that must not be reached.
type nopDB struct{ repo.DBTX }
