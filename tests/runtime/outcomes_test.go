package runtime_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"

	"github.com/knowledgefs/kfsdb/kfstype"
	"github.com/knowledgefs/kfsdb/outcomes"
	"github.com/knowledgefs/kfsdb/tests/pgtest"
	"github.com/knowledgefs/kfsdb/tests/testfactory"
)

// outcomeListener runs outcomes.Listen on pool until the test ends.
type outcomeListener struct {
	got       chan outcomes.Outcome
	malformed chan string
}

func listenOutcomes(t *testing.T, e *env) *outcomeListener {
	t.Helper()
	l := &outcomeListener{got: make(chan outcomes.Outcome, 100), malformed: make(chan string, 100)}
	ctx, cancel := context.WithCancel(e.ctx)
	listening, done := make(chan struct{}), make(chan error, 1)
	go func() {
		done <- outcomes.Listen(ctx, e.pool, func(o outcomes.Outcome) { l.got <- o }, &outcomes.ListenConfig{
			Listening: func() { close(listening) },
			Malformed: func(payload string, err error) {
				var pe *outcomes.PayloadError
				if errors.As(err, &pe) {
					l.malformed <- payload
				}
			},
		})
	}()
	t.Cleanup(func() {
		cancel()
		require.ErrorIs(t, <-done, context.Canceled)
	})
	select {
	case <-listening:
	case err := <-done:
		t.Fatalf("Listen returned before listening: %v", err)
	case <-time.After(hangAfter):
		t.Fatal("Listen did not start listening")
	}
	return l
}

// next waits for the next outcome.
func (l *outcomeListener) next(t *testing.T) outcomes.Outcome {
	t.Helper()
	select {
	case o := <-l.got:
		return o
	case <-time.After(hangAfter):
		t.Fatal("no outcome notification")
		return outcomes.Outcome{}
	}
}

// outcomeOf is the notification an ended attempt should cause.
func outcomeOf(ctx context.Context, t *testing.T, e *env, a *kfstype.Attempt) outcomes.Outcome {
	t.Helper()
	rows := testfactory.RequireInvariants(ctx, t, e.pool, a.ID)
	o := outcomes.Outcome{AttemptID: a.ID, TenantID: a.TenantID, RunState: rows.Attempt.RunState}
	if rows.Attempt.LastErrorCode != nil {
		o.ErrorCode = *rows.Attempt.LastErrorCode
	}
	return o
}

func TestOutcomeNotifications(t *testing.T) {
	t.Parallel()

	// Notifications of one channel arrive in commit order, so the first
	// one heard after an ending made while off is the first ending made
	// while on: nothing was sent for the other. Mutations: the trigger
	// created enabled (the canceled attempt arrives first); its WHEN
	// dropped (heartbeats and advances notify non-terminal states, which
	// Listen reports as malformed).
	t.Run("EveryEndingNotifiesWhileOnAndNoneWhileOff", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t, 8)
		ctx, pool := e.ctx, e.pool
		d := &testfactory.Driver{DB: pool, Repo: e.repo}
		inState := func(state kfstype.RunState) *kfstype.Attempt {
			return d.InState(ctx, t, testfactory.NewScope(ctx, t, pool, nil), state)
		}
		on, err := outcomes.Enabled(ctx, pool)
		require.NoError(t, err)
		require.False(t, on, "off after the migration")
		l := listenOutcomes(t, e)

		inState(kfstype.RunStateCanceled) // while off
		require.NoError(t, outcomes.Enable(ctx, pool, 0))
		require.NoError(t, outcomes.Enable(ctx, pool, 0), "enabling twice is fine")
		on, err = outcomes.Enabled(ctx, pool)
		require.NoError(t, err)
		require.True(t, on)
		var ended []*kfstype.Attempt
		for _, s := range []kfstype.RunState{kfstype.RunStateSucceeded, kfstype.RunStateFailed, kfstype.RunStateCanceled, kfstype.RunStateSuperseded} {
			ended = append(ended, inState(s))
		}
		_, err = pool.Exec(ctx, `SELECT pg_notify($1, 'not an outcome')`, outcomes.Channel)
		require.NoError(t, err)
		for _, a := range ended {
			require.Equal(t, outcomeOf(ctx, t, e, a), l.next(t))
		}
		require.Equal(t, kfstype.RunStateFailed, ended[1].RunState)
		require.Equal(t, kfstype.ErrorCodeCompilationFailed, outcomeOf(ctx, t, e, ended[1]).ErrorCode)

		require.NoError(t, outcomes.Disable(ctx, pool, 0))
		inState(kfstype.RunStateCanceled) // while off again
		require.NoError(t, outcomes.Enable(ctx, pool, 0))
		last := inState(kfstype.RunStateSucceeded)
		require.Equal(t, outcomeOf(ctx, t, e, last), l.next(t))
		require.Equal(t, "not an outcome", <-l.malformed)
		require.Empty(t, l.malformed)
	})

	// ALTER TABLE waits for transactions writing attempts; the helper's
	// lock_timeout bounds that wait and changes nothing. Mutation: no SET
	// LOCAL lock_timeout (Enable waits for the open transaction, and the
	// test fails on the hang bound).
	t.Run("EnableGivesUpAfterItsLockTimeout", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t, 8)
		ctx, pool := e.ctx, e.pool
		tx, err := pool.Begin(ctx)
		require.NoError(t, err)
		defer func() { _ = tx.Rollback(ctx) }()
		_, err = tx.Exec(ctx, `LOCK TABLE document_compilation_attempts IN ROW EXCLUSIVE MODE`)
		require.NoError(t, err)

		cctx, cancel := context.WithTimeout(ctx, hangAfter)
		defer cancel()
		err = outcomes.Enable(cctx, pool, 50*time.Millisecond)
		var pgErr *pgconn.PgError
		require.ErrorAs(t, err, &pgErr)
		require.Equal(t, "55P03", pgErr.Code, "lock_not_available: %v", err)
		require.NoError(t, tx.Rollback(ctx))
		on, err := outcomes.Enabled(ctx, pool)
		require.NoError(t, err)
		require.False(t, on, "nothing changed")
		require.NoError(t, outcomes.Enable(ctx, pool, 0))
	})

	t.Run("NotInstalledBeforeTheMigration", func(t *testing.T) {
		t.Parallel()
		db := pgtest.NewEmptyDB(t)
		_, err := outcomes.Enabled(t.Context(), db.Pool)
		require.ErrorIs(t, err, outcomes.ErrNotInstalled)
		require.ErrorIs(t, outcomes.Enable(t.Context(), db.Pool, 0), outcomes.ErrNotInstalled)
	})
}
