package testfactory

import (
	"context"
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/knowledgefs/kfsdb/kfstype"
)

// InstallStateAudit adds a trigger to a test database that records every
// change of an attempt's run_state in table test_state_audit, in commit
// order of the row's lock (seq), for [RequireTerminalOnce].
func InstallStateAudit(ctx context.Context, t testing.TB, db DBTX) {
	t.Helper()
	_, err := db.Exec(ctx, `
		CREATE TABLE test_state_audit (
		  seq        bigserial PRIMARY KEY,
		  attempt_id uuid NOT NULL,
		  old_state  text NOT NULL,
		  new_state  text NOT NULL,
		  changed_at timestamptz NOT NULL
		);
		CREATE FUNCTION test_state_audit_fn() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN
		  INSERT INTO test_state_audit (attempt_id, old_state, new_state, changed_at)
		  VALUES (NEW.id, OLD.run_state, NEW.run_state, NEW.updated_at);
		  RETURN NULL;
		END $$;
		CREATE TRIGGER test_state_audit_tg AFTER UPDATE ON document_compilation_attempts
		  FOR EACH ROW WHEN (OLD.run_state IS DISTINCT FROM NEW.run_state)
		  EXECUTE FUNCTION test_state_audit_fn();`)
	require.NoError(t, err)
}

// TerminalCounts says how attempts ended, from the state audit.
type TerminalCounts struct {
	// Outcomes counts transitions into a terminal state, by state.
	Outcomes map[kfstype.RunState]int
	// Reactivations counts RetryFailed (failed -> dispatch_pending).
	Reactivations int
}

// RequireTerminalOnce requires, for each of ids, that the run_state
// changes recorded by [InstallStateAudit] reach a terminal state exactly
// once per life of the attempt: a terminal state is left only by
// RetryFailed (failed -> dispatch_pending), never for another terminal
// state or a live one, and the last state is terminal. Each row's changes
// are serialized by its row lock, so seq orders them.
func RequireTerminalOnce(ctx context.Context, t testing.TB, db DBTX, ids []uuid.UUID) TerminalCounts {
	t.Helper()
	rows, err := db.Query(ctx, `SELECT attempt_id, old_state, new_state FROM test_state_audit WHERE attempt_id = ANY($1) ORDER BY seq`, ids)
	require.NoError(t, err)
	defer rows.Close()
	last := map[uuid.UUID]kfstype.RunState{}
	tc := TerminalCounts{Outcomes: map[kfstype.RunState]int{}}
	for rows.Next() {
		var id uuid.UUID
		var from, to kfstype.RunState
		require.NoError(t, rows.Scan(&id, &from, &to))
		if prev, ok := last[id]; ok {
			require.Equal(t, prev, from, "attempt %s: change from %s recorded after a change to %s", id, from, prev)
		}
		if from.Terminal() {
			require.True(t, from == kfstype.RunStateFailed && to == kfstype.RunStateDispatchPending,
				"attempt %s left terminal state %s for %s", id, from, to)
			tc.Reactivations++
		}
		if to.Terminal() {
			tc.Outcomes[to]++
		}
		last[id] = to
	}
	require.NoError(t, rows.Err())
	for _, id := range ids {
		st, ok := last[id]
		require.True(t, ok, "attempt %s never changed state", id)
		require.True(t, st.Terminal(), "attempt %s ended %s", id, st)
	}
	return tc
}
