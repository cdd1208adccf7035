package repo_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/knowledgefs/kfsdb/kfstype"
	"github.com/knowledgefs/kfsdb/repo"
	"github.com/knowledgefs/kfsdb/tests/testfactory"
)

// Helpers of the control-plane tests carry a ctl prefix so they cannot
// collide with other files of the package.

// ctlCount counts the rows of a table.
func ctlCount(t *testing.T, b *testBundle, table string) int {
	t.Helper()
	var n int
	require.NoError(t, b.db.Pool.QueryRow(b.ctx, "SELECT count(*) FROM "+table).Scan(&n))
	return n
}

func ctlRequireTransitionError(t *testing.T, err error, from kfstype.RunState) *repo.TransitionError {
	t.Helper()
	var te *repo.TransitionError
	require.ErrorAs(t, err, &te)
	require.ErrorIs(t, err, repo.ErrInvalidTransition)
	require.Equal(t, from, te.From)
	return te
}

// ctlEnded is the rows expected after Cancel or Supersede of before at now.
func ctlEnded(before *testfactory.Rows, state kfstype.RunState, code string, reason *string, now time.Time) testfactory.Rows {
	want := *before
	a, o := &want.Attempt, &want.Outbox
	a.RunState = state
	a.Active = false
	a.CompletedAt = &now
	a.WorkerID, a.LeaseToken, a.LeaseExpiresAt, a.HeartbeatAt = nil, nil, nil, nil
	a.RetryAt = nil
	if reason != nil {
		a.LastErrorCode, a.LastErrorMessage = &code, reason
	}
	a.RowVersion++
	a.UpdatedAt = now
	o.Status = kfstype.OutboxStatusCanceled
	o.LockedBy, o.LockToken, o.LockedUntil = nil, nil, nil
	o.UpdatedAt = now
	return want
}

// ctlEndOp is Cancel or Supersede, which share their rules.
type ctlEndOp struct {
	verb  string
	state kfstype.RunState
	code  string
	call  func(b *testBundle, ref repo.AttemptRef, reason *string) (*kfstype.Attempt, error)
}

var ctlCancel = ctlEndOp{
	verb: "Cancel", state: kfstype.RunStateCanceled, code: kfstype.ErrorCodeCanceled,
	call: func(b *testBundle, ref repo.AttemptRef, reason *string) (*kfstype.Attempt, error) {
		return b.repo.Cancel(b.ctx, b.db.Pool, &repo.CancelParams{AttemptRef: ref, Reason: reason})
	},
}

var ctlSupersede = ctlEndOp{
	verb: "Supersede", state: kfstype.RunStateSuperseded, code: kfstype.ErrorCodeSuperseded,
	call: func(b *testBundle, ref repo.AttemptRef, reason *string) (*kfstype.Attempt, error) {
		return b.repo.Supersede(b.ctx, b.db.Pool, &repo.SupersedeParams{AttemptRef: ref, Reason: reason})
	},
}

var ctlLiveStates = []kfstype.RunState{
	kfstype.RunStateDispatchPending, kfstype.RunStateQueued, kfstype.RunStateRunning, kfstype.RunStateRetryWait,
}

var ctlTerminalStates = []kfstype.RunState{
	kfstype.RunStateSucceeded, kfstype.RunStateFailed, kfstype.RunStateCanceled, kfstype.RunStateSuperseded,
}

// ctlStateName turns dispatch_pending into DispatchPending for test names.
func ctlStateName(s kfstype.RunState) string {
	var out strings.Builder
	for _, part := range strings.Split(string(s), "_") {
		out.WriteString(strings.ToUpper(part[:1]) + part[1:])
	}
	return out.String()
}

func TestCancel(t *testing.T)    { testEndOp(t, ctlCancel) }
func TestSupersede(t *testing.T) { testEndOp(t, ctlSupersede) }

func testEndOp(t *testing.T, op ctlEndOp) {
	t.Parallel()
	past := map[kfstype.RunState]string{kfstype.RunStateCanceled: "Cancels", kfstype.RunStateSuperseded: "Supersedes"}[op.state]

	for _, state := range ctlLiveStates {
		for _, withReason := range []bool{true, false} {
			name := past + ctlStateName(state) + "Attempt"
			if withReason {
				name += "WithReason"
			} else {
				name += "WithoutReasonKeepingLastError"
			}
			t.Run(name, func(t *testing.T) {
				b := setup(t)
				s := b.scope(t)
				a := b.drv.InState(b.ctx, t, s, state)
				before := testfactory.ReadRows(b.ctx, t, b.db.Pool, a.ID)
				now := b.clock.Advance(time.Minute)

				var reason *string
				if withReason {
					reason = new("operator asked")
				}
				got, err := op.call(b, s.Ref(a.ID), reason)
				require.NoError(t, err)

				after := testfactory.RequireInvariants(b.ctx, t, b.db.Pool, a.ID)
				require.Equal(t, ctlEnded(before, op.state, op.code, reason, now), *after)
				require.Equal(t, after.Attempt, *got)
				if !withReason && state == kfstype.RunStateRetryWait {
					require.Equal(t, kfstype.ErrorCodeCompilationRetryable, *after.Attempt.LastErrorCode)
					require.Equal(t, "transient", *after.Attempt.LastErrorMessage)
				}
				// The document version's slot is free again.
				res, err := b.repo.Start(b.ctx, b.db.Pool, s.StartParams())
				require.NoError(t, err)
				require.True(t, res.Created)
				testfactory.RequireInvariants(b.ctx, t, b.db.Pool, res.Attempt.ID)
			})
		}
	}

	t.Run("CutsLongReasonTo4096Characters", func(t *testing.T) {
		b := setup(t)
		s := b.scope(t)
		a := b.drv.InState(b.ctx, t, s, kfstype.RunStateDispatchPending)
		got, err := op.call(b, s.Ref(a.ID), new(strings.Repeat("é", 5000)))
		require.NoError(t, err)
		after := testfactory.RequireInvariants(b.ctx, t, b.db.Pool, a.ID)
		require.Equal(t, strings.Repeat("é", 4096), *after.Attempt.LastErrorMessage)
		require.Equal(t, after.Attempt, *got)
	})

	t.Run(past+"AtExpectedRowVersion", func(t *testing.T) {
		b := setup(t)
		s := b.scope(t)
		a := b.drv.InState(b.ctx, t, s, kfstype.RunStateQueued)
		require.EqualValues(t, 1, a.RowVersion)
		before := testfactory.ReadRows(b.ctx, t, b.db.Pool, a.ID)
		now := b.clock.Advance(time.Minute)
		ref := s.Ref(a.ID)
		ref.ExpectedRowVersion = new(a.RowVersion)
		got, err := op.call(b, ref, nil)
		require.NoError(t, err)
		after := testfactory.RequireInvariants(b.ctx, t, b.db.Pool, a.ID)
		require.Equal(t, ctlEnded(before, op.state, op.code, nil, now), *after)
		require.Equal(t, after.Attempt, *got)
	})

	t.Run("RefusesStaleRowVersion", func(t *testing.T) {
		b := setup(t)
		s := b.scope(t)
		a := b.drv.InState(b.ctx, t, s, kfstype.RunStateQueued)
		snap := b.snapshot(t, a.ID)
		b.clock.Advance(time.Minute)
		for _, v := range []int32{0, 2} {
			ref := s.Ref(a.ID)
			ref.ExpectedRowVersion = new(v)
			_, err := op.call(b, ref, new("late"))
			require.ErrorIs(t, err, repo.ErrStaleRowVersion)
			snap.requireUnchanged(t, b)
		}
	})

	for _, state := range ctlTerminalStates {
		t.Run("Refuses"+ctlStateName(state)+"Attempt", func(t *testing.T) {
			b := setup(t)
			s := b.scope(t)
			a := b.drv.InState(b.ctx, t, s, state)
			snap := b.snapshot(t, a.ID)
			b.clock.Advance(time.Minute)
			_, err := op.call(b, s.Ref(a.ID), new("too late"))
			te := ctlRequireTransitionError(t, err, state)
			require.Equal(t, a.ID, te.AttemptID)
			require.Equal(t, op.state, te.To)
			snap.requireUnchanged(t, b)
		})
	}

	t.Run("RefusesUnknownAttempt", func(t *testing.T) {
		b := setup(t)
		s := b.scope(t)
		a := b.drv.InState(b.ctx, t, s, kfstype.RunStateDispatchPending)
		snap := b.snapshot(t, a.ID)
		_, err := op.call(b, s.Ref(uuid.New()), nil)
		require.ErrorIs(t, err, repo.ErrNotFound)
		snap.requireUnchanged(t, b)
	})

	t.Run("KillsTheWorkersLease", func(t *testing.T) {
		b := setup(t)
		s := b.scope(t)
		a, lease, _ := b.drv.Running(b.ctx, t, s)
		testfactory.RequireInvariants(b.ctx, t, b.db.Pool, a.ID)
		// Paired positive: the lease is alive before.
		b.clock.Advance(10 * time.Second)
		lease, err := b.repo.Heartbeat(b.ctx, b.db.Pool, &repo.HeartbeatParams{Lease: lease})
		require.NoError(t, err)
		testfactory.RequireInvariants(b.ctx, t, b.db.Pool, a.ID)

		b.clock.Advance(time.Second)
		_, err = op.call(b, s.Ref(a.ID), nil)
		require.NoError(t, err)
		testfactory.RequireInvariants(b.ctx, t, b.db.Pool, a.ID)

		snap := b.snapshot(t, a.ID)
		b.clock.Advance(time.Second)
		_, err = b.repo.Heartbeat(b.ctx, b.db.Pool, &repo.HeartbeatParams{Lease: lease})
		require.ErrorIs(t, err, repo.ErrLeaseLost)
		snap.requireUnchanged(t, b)
		_, err = b.repo.Fail(b.ctx, b.db.Pool, &repo.FailParams{Lease: lease, ErrorCode: "X", ErrorMessage: "x"})
		require.ErrorIs(t, err, repo.ErrLeaseLost)
		snap.requireUnchanged(t, b)
	})

	// A relay that claimed the outbox row before the call cannot mark it
	// dispatched afterwards, whether the attempt waited for its first
	// publication or was running with an expired lease (redelivery).
	for _, state := range []kfstype.RunState{kfstype.RunStateDispatchPending, kfstype.RunStateRunning} {
		t.Run("FencesRelayHoldingOutboxLockOf"+ctlStateName(state)+"Attempt", func(t *testing.T) {
			b := setup(t)
			s := b.scope(t)
			a := b.drv.InState(b.ctx, t, s, state)
			if state == kfstype.RunStateRunning {
				b.clock.Advance(repo.LeaseDurationDefault)
			}
			m := b.drv.Claim(b.ctx, t, a.ID)
			before := testfactory.RequireInvariants(b.ctx, t, b.db.Pool, a.ID)
			require.Equal(t, kfstype.OutboxStatusDispatching, before.Outbox.Status)

			now := b.clock.Advance(time.Second)
			_, err := op.call(b, s.Ref(a.ID), nil)
			require.NoError(t, err)
			after := testfactory.RequireInvariants(b.ctx, t, b.db.Pool, a.ID)
			require.Equal(t, ctlEnded(before, op.state, op.code, nil, now), *after)

			snap := b.snapshot(t, a.ID)
			b.clock.Advance(time.Second)
			res, err := b.repo.MarkDispatched(b.ctx, b.db.Pool, &repo.MarkDispatchedParams{Dispatches: []repo.Dispatch{{
				OutboxID: m.ID, LockToken: *m.LockToken, QueueJobID: b.drv.NextJobID(),
			}}})
			require.NoError(t, err)
			require.Empty(t, res.Marked)
			require.Equal(t, []uuid.UUID{m.ID}, res.Refused)
			snap.requireUnchanged(t, b)

			// Nor does a canceled row come up for a claim again.
			b.clock.Advance(time.Hour)
			msgs, err := b.repo.ClaimOutbox(b.ctx, b.db.Pool, &repo.ClaimParams{RelayID: "relay-2", BatchSize: 100})
			require.NoError(t, err)
			require.Empty(t, msgs)
			snap.requireUnchanged(t, b)
		})
	}

	t.Run("ValidatesInput", func(t *testing.T) {
		b := setup(t)
		s := b.scope(t)
		a := b.drv.InState(b.ctx, t, s, kfstype.RunStateDispatchPending)
		snap := b.snapshot(t, a.ID)
		for _, tc := range []struct {
			field string
			edit  func(*repo.AttemptRef)
		}{
			{"TenantID", func(r *repo.AttemptRef) { r.TenantID = "" }},
			{"TenantID", func(r *repo.AttemptRef) { r.TenantID = strings.Repeat("t", 256) }},
			{"TenantID", func(r *repo.AttemptRef) { r.TenantID = "a\x00b" }},
			{"KnowledgeSpaceID", func(r *repo.AttemptRef) { r.KnowledgeSpaceID = uuid.Nil }},
			{"AttemptID", func(r *repo.AttemptRef) { r.AttemptID = uuid.Nil }},
			{"ExpectedRowVersion", func(r *repo.AttemptRef) { r.ExpectedRowVersion = new(int32(-1)) }},
		} {
			ref := s.Ref(a.ID)
			tc.edit(&ref)
			_, err := op.call(b, ref, nil)
			requireInputError(t, err, tc.field)
			snap.requireUnchanged(t, b)
		}
	})
}

func TestRetryFailed(t *testing.T) {
	t.Parallel()

	// failedAt builds a failed attempt that got to projection_built with a
	// candidate bound, was dispatched (job ids set) and ran once.
	failedAt := func(t *testing.T, b *testBundle, s *testfactory.Scope) *kfstype.Attempt {
		t.Helper()
		a, lease, _ := b.drv.Running(b.ctx, t, s)
		testfactory.RequireInvariants(b.ctx, t, b.db.Pool, a.ID)
		b.clock.Advance(time.Second)
		testfactory.RequireInvariants(b.ctx, t, b.db.Pool, b.drv.AdvanceTo(b.ctx, t, s, lease, kfstype.CheckpointProjectionBuilt).ID)
		b.clock.Advance(time.Second)
		a, err := b.repo.Fail(b.ctx, b.db.Pool, &repo.FailParams{
			Lease: lease, ErrorCode: kfstype.ErrorCodeCompilationFailed, ErrorMessage: "parser crashed",
		})
		require.NoError(t, err)
		testfactory.RequireInvariants(b.ctx, t, b.db.Pool, a.ID)
		return a
	}

	// retried is the rows expected after RetryFailed of before at now.
	retried := func(before *testfactory.Rows, now time.Time) testfactory.Rows {
		want := *before
		a, o := &want.Attempt, &want.Outbox
		a.RunState = kfstype.RunStateDispatchPending
		a.Active = true
		a.ExecutionAttempts = 0
		a.CompletedAt, a.StartedAt = nil, nil
		a.LastErrorCode, a.LastErrorMessage = nil, nil
		a.WorkerID, a.LeaseToken, a.LeaseExpiresAt, a.HeartbeatAt = nil, nil, nil, nil
		a.QueueJobID, a.ExternalJobID, a.RetryAt = nil, nil, nil
		a.RowVersion++
		a.UpdatedAt = now
		o.Status = kfstype.OutboxStatusPending
		o.DispatchAttempts = 0
		o.AvailableAt = now
		o.QueueJobID, o.ExternalJobID, o.DeliveredAt, o.LastError = nil, nil, nil, nil
		o.LockedBy, o.LockToken, o.LockedUntil = nil, nil, nil
		o.UpdatedAt = now
		return want
	}

	t.Run("ReactivatesFailedAttemptKeepingCheckpointAndCandidate", func(t *testing.T) {
		b := setup(t)
		s := b.scope(t)
		a := failedAt(t, b, s)
		before := testfactory.ReadRows(b.ctx, t, b.db.Pool, a.ID)
		require.Equal(t, kfstype.CheckpointProjectionBuilt, before.Attempt.Checkpoint)
		require.NotNil(t, before.Attempt.CandidatePublicationID)
		require.NotNil(t, before.Outbox.QueueJobID)
		require.NotNil(t, before.Outbox.DeliveredAt)
		require.NotNil(t, before.Attempt.StartedAt)

		now := b.clock.Advance(time.Minute)
		got, err := b.repo.RetryFailed(b.ctx, b.db.Pool, new(s.Ref(a.ID)))
		require.NoError(t, err)
		after := testfactory.RequireInvariants(b.ctx, t, b.db.Pool, a.ID)
		require.Equal(t, retried(before, now), *after)
		require.Equal(t, after.Attempt, *got)

		// The relay publishes it again and a worker resumes the work.
		del := b.drv.Dispatch(b.ctx, t, a.ID)
		testfactory.RequireInvariants(b.ctx, t, b.db.Pool, a.ID)
		got, _, err = b.repo.AcquireLease(b.ctx, b.db.Pool, &repo.AcquireLeaseParams{Delivery: *del, WorkerID: "w2"})
		require.NoError(t, err)
		after = testfactory.RequireInvariants(b.ctx, t, b.db.Pool, a.ID)
		require.EqualValues(t, 1, after.Attempt.ExecutionAttempts)
		require.Equal(t, kfstype.CheckpointProjectionBuilt, got.Checkpoint)
	})

	t.Run("RetriesAtExpectedRowVersion", func(t *testing.T) {
		b := setup(t)
		s := b.scope(t)
		a := failedAt(t, b, s)
		before := testfactory.ReadRows(b.ctx, t, b.db.Pool, a.ID)
		now := b.clock.Advance(time.Minute)
		ref := s.Ref(a.ID)
		ref.ExpectedRowVersion = new(a.RowVersion)
		got, err := b.repo.RetryFailed(b.ctx, b.db.Pool, &ref)
		require.NoError(t, err)
		after := testfactory.RequireInvariants(b.ctx, t, b.db.Pool, a.ID)
		require.Equal(t, retried(before, now), *after)
		require.Equal(t, after.Attempt, *got)
	})

	t.Run("RefusesStaleRowVersion", func(t *testing.T) {
		b := setup(t)
		s := b.scope(t)
		a := failedAt(t, b, s)
		snap := b.snapshot(t, a.ID)
		b.clock.Advance(time.Minute)
		ref := s.Ref(a.ID)
		ref.ExpectedRowVersion = new(a.RowVersion - 1)
		_, err := b.repo.RetryFailed(b.ctx, b.db.Pool, &ref)
		require.ErrorIs(t, err, repo.ErrStaleRowVersion)
		snap.requireUnchanged(t, b)
	})

	for _, state := range []kfstype.RunState{
		kfstype.RunStateDispatchPending, kfstype.RunStateQueued, kfstype.RunStateRunning, kfstype.RunStateRetryWait,
		kfstype.RunStateSucceeded, kfstype.RunStateCanceled, kfstype.RunStateSuperseded,
	} {
		t.Run("Refuses"+ctlStateName(state)+"Attempt", func(t *testing.T) {
			b := setup(t)
			s := b.scope(t)
			a := b.drv.InState(b.ctx, t, s, state)
			snap := b.snapshot(t, a.ID)
			b.clock.Advance(time.Minute)
			_, err := b.repo.RetryFailed(b.ctx, b.db.Pool, new(s.Ref(a.ID)))
			te := ctlRequireTransitionError(t, err, state)
			require.Equal(t, kfstype.RunStateDispatchPending, te.To)
			snap.requireUnchanged(t, b)
		})
	}

	t.Run("RefusesWhileAnotherAttemptIsLive", func(t *testing.T) {
		b := setup(t)
		s := b.scope(t)
		failed := failedAt(t, b, s)
		live := b.drv.InState(b.ctx, t, s, kfstype.RunStateDispatchPending)
		snap := b.snapshot(t, failed.ID, live.ID)
		b.clock.Advance(time.Minute)
		_, err := b.repo.RetryFailed(b.ctx, b.db.Pool, new(s.Ref(failed.ID)))
		require.ErrorIs(t, err, repo.ErrLiveAttemptExists)
		require.NotErrorIs(t, err, repo.ErrInvalidTransition)
		snap.requireUnchanged(t, b)

		// Paired positive: once the other attempt ended the retry goes through.
		_, err = b.repo.Cancel(b.ctx, b.db.Pool, &repo.CancelParams{AttemptRef: s.Ref(live.ID)})
		require.NoError(t, err)
		testfactory.RequireInvariants(b.ctx, t, b.db.Pool, live.ID)
		before := testfactory.ReadRows(b.ctx, t, b.db.Pool, failed.ID)
		now := b.clock.Advance(time.Minute)
		_, err = b.repo.RetryFailed(b.ctx, b.db.Pool, new(s.Ref(failed.ID)))
		require.NoError(t, err)
		after := testfactory.RequireInvariants(b.ctx, t, b.db.Pool, failed.ID)
		require.Equal(t, retried(before, now), *after)
	})

	t.Run("RefusesUnknownAttempt", func(t *testing.T) {
		b := setup(t)
		s := b.scope(t)
		a := failedAt(t, b, s)
		snap := b.snapshot(t, a.ID)
		_, err := b.repo.RetryFailed(b.ctx, b.db.Pool, new(s.Ref(uuid.New())))
		require.ErrorIs(t, err, repo.ErrNotFound)
		snap.requireUnchanged(t, b)
	})

	t.Run("ValidatesInput", func(t *testing.T) {
		b := setup(t)
		s := b.scope(t)
		a := failedAt(t, b, s)
		snap := b.snapshot(t, a.ID)
		ref := s.Ref(a.ID)
		ref.AttemptID = uuid.Nil
		_, err := b.repo.RetryFailed(b.ctx, b.db.Pool, &ref)
		requireInputError(t, err, "AttemptID")
		ref = s.Ref(a.ID)
		ref.TenantID = ""
		_, err = b.repo.RetryFailed(b.ctx, b.db.Pool, &ref)
		requireInputError(t, err, "TenantID")
		snap.requireUnchanged(t, b)
	})
}

func TestPurge(t *testing.T) {
	t.Parallel()

	// terminalAttempts makes n terminal attempts in the tenant, one a
	// minute, cycling through the terminal states; returned oldest first.
	terminalAttempts := func(t *testing.T, b *testBundle, tenant string, n int) ([]*kfstype.Attempt, []*testfactory.Scope) {
		t.Helper()
		var out []*kfstype.Attempt
		var scopes []*testfactory.Scope
		for i := range n {
			s := testfactory.NewScope(b.ctx, t, b.db.Pool, &testfactory.ScopeOpts{TenantID: &tenant})
			b.clock.Advance(time.Minute)
			out = append(out, b.drv.InState(b.ctx, t, s, ctlTerminalStates[i%len(ctlTerminalStates)]))
			scopes = append(scopes, s)
		}
		return out, scopes
	}

	exists := func(t *testing.T, b *testBundle, id uuid.UUID) (attempt, outbox bool) {
		t.Helper()
		require.NoError(t, b.db.Pool.QueryRow(b.ctx, `SELECT
			EXISTS (SELECT 1 FROM document_compilation_attempts WHERE id = $1),
			EXISTS (SELECT 1 FROM document_compilation_outbox WHERE attempt_id = $1)`, id).Scan(&attempt, &outbox))
		return attempt, outbox
	}
	requireGone := func(t *testing.T, b *testBundle, as ...*kfstype.Attempt) {
		t.Helper()
		for _, a := range as {
			at, ob := exists(t, b, a.ID)
			require.False(t, at, "attempt %s still there", a.ID)
			require.False(t, ob, "outbox row of %s still there", a.ID)
		}
	}

	t.Run("DeletesTerminalAttemptsCompletedBeforeCutoff", func(t *testing.T) {
		b := setup(t)
		tenant := "tenant-" + uuid.NewString()[:8]
		terminal, _ := terminalAttempts(t, b, tenant, 4)
		// Live attempts of the tenant in every live state stay.
		var live []uuid.UUID
		for _, state := range ctlLiveStates {
			s := testfactory.NewScope(b.ctx, t, b.db.Pool, &testfactory.ScopeOpts{TenantID: &tenant})
			live = append(live, b.drv.InState(b.ctx, t, s, state).ID)
		}
		// Another tenant's terminal attempt stays.
		other := b.drv.InState(b.ctx, t, b.scope(t), kfstype.RunStateCanceled)
		b.clock.Advance(time.Hour)

		// The cut-off is exclusive: the attempt completed at it stays.
		keep := append([]uuid.UUID{terminal[2].ID, terminal[3].ID, other.ID}, live...)
		snap := b.snapshot(t, keep...)
		n, err := b.repo.Purge(b.ctx, b.db.Pool, &repo.PurgeParams{TenantID: tenant, CompletedBefore: *terminal[2].CompletedAt})
		require.NoError(t, err)
		require.Equal(t, 2, n)
		requireGone(t, b, terminal[0], terminal[1])
		b.requireUnchanged(t, snap.rows...)

		snap = b.snapshot(t, append([]uuid.UUID{other.ID}, live...)...)
		n, err = b.repo.Purge(b.ctx, b.db.Pool, &repo.PurgeParams{TenantID: tenant, CompletedBefore: b.clock.Now()})
		require.NoError(t, err)
		require.Equal(t, 2, n)
		requireGone(t, b, terminal[2], terminal[3])
		b.requireUnchanged(t, snap.rows...)
		require.Equal(t, len(live)+1, ctlCount(t, b, "document_compilation_attempts"))
		require.Equal(t, len(live)+1, ctlCount(t, b, "document_compilation_outbox"))

		// Nothing left to purge: a no-op.
		snap = b.snapshot(t, append([]uuid.UUID{other.ID}, live...)...)
		n, err = b.repo.Purge(b.ctx, b.db.Pool, &repo.PurgeParams{TenantID: tenant, CompletedBefore: b.clock.Now()})
		require.NoError(t, err)
		require.Zero(t, n)
		snap.requireUnchanged(t, b)
	})

	t.Run("DeletesOldestFirstInBoundedBatches", func(t *testing.T) {
		b := setup(t)
		tenant := "tenant-" + uuid.NewString()[:8]
		terminal, _ := terminalAttempts(t, b, tenant, 5)
		b.clock.Advance(time.Minute)
		p := &repo.PurgeParams{TenantID: tenant, CompletedBefore: b.clock.Now(), BatchSize: 2}
		for i, want := range []int{2, 2, 1, 0} {
			n, err := b.repo.Purge(b.ctx, b.db.Pool, p)
			require.NoError(t, err)
			require.Equal(t, want, n, "call %d", i)
			done := min(2*(i+1), len(terminal))
			requireGone(t, b, terminal[:done]...)
			for _, a := range terminal[done:] {
				testfactory.RequireInvariants(b.ctx, t, b.db.Pool, a.ID)
			}
		}
		require.Zero(t, ctlCount(t, b, "document_compilation_attempts"))
		require.Zero(t, ctlCount(t, b, "document_compilation_outbox"))
	})

	t.Run("SkipsRowsLockedByAnotherTransaction", func(t *testing.T) {
		b := setup(t)
		tenant := "tenant-" + uuid.NewString()[:8]
		terminal, _ := terminalAttempts(t, b, tenant, 3)
		b.clock.Advance(time.Minute)

		tx, err := b.db.Pool.Begin(b.ctx)
		require.NoError(t, err)
		defer func() { _ = tx.Rollback(context.WithoutCancel(b.ctx)) }()
		var locked uuid.UUID
		require.NoError(t, tx.QueryRow(b.ctx, `SELECT id FROM document_compilation_attempts WHERE id = $1 FOR UPDATE`, terminal[0].ID).Scan(&locked))

		snap := b.snapshot(t, terminal[0].ID)
		p := &repo.PurgeParams{TenantID: tenant, CompletedBefore: b.clock.Now(), BatchSize: 10}
		n, err := b.repo.Purge(b.ctx, b.db.Pool, p)
		require.NoError(t, err)
		require.Equal(t, 2, n)
		requireGone(t, b, terminal[1], terminal[2])
		b.requireUnchanged(t, snap.rows...)

		// Released, the row goes on the next call.
		require.NoError(t, tx.Rollback(b.ctx))
		n, err = b.repo.Purge(b.ctx, b.db.Pool, p)
		require.NoError(t, err)
		require.Equal(t, 1, n)
		requireGone(t, b, terminal[0])
	})

	t.Run("ValidatesInput", func(t *testing.T) {
		b := setup(t)
		tenant := "tenant-" + uuid.NewString()[:8]
		terminal, _ := terminalAttempts(t, b, tenant, 1)
		b.clock.Advance(time.Minute)
		snap := b.snapshot(t, terminal[0].ID)
		cut := b.clock.Now()
		for _, tc := range []struct {
			name  string
			p     repo.PurgeParams
			field string
		}{
			{"EmptyTenant", repo.PurgeParams{CompletedBefore: cut}, "TenantID"},
			{"LongTenant", repo.PurgeParams{TenantID: strings.Repeat("t", 256), CompletedBefore: cut}, "TenantID"},
			{"NulInTenant", repo.PurgeParams{TenantID: "t\x00", CompletedBefore: cut}, "TenantID"},
			{"ZeroCutoff", repo.PurgeParams{TenantID: tenant}, "CompletedBefore"},
			{"NegativeBatch", repo.PurgeParams{TenantID: tenant, CompletedBefore: cut, BatchSize: -1}, "BatchSize"},
			{"OversizedBatch", repo.PurgeParams{TenantID: tenant, CompletedBefore: cut, BatchSize: repo.MaxPurgeBatch + 1}, "BatchSize"},
		} {
			n, err := b.repo.Purge(b.ctx, b.db.Pool, &tc.p)
			requireInputError(t, err, tc.field)
			require.Zero(t, n, tc.name)
			snap.requireUnchanged(t, b)
		}
		// Paired positive: the largest batch is accepted.
		n, err := b.repo.Purge(b.ctx, b.db.Pool, &repo.PurgeParams{TenantID: tenant, CompletedBefore: cut, BatchSize: repo.MaxPurgeBatch})
		require.NoError(t, err)
		require.Equal(t, 1, n)
	})
}

// TestCrossTenant calls every control-plane function with another tenant's
// id, or the right tenant and another space: each says "not found" (or
// nothing) and writes nothing.
func TestCrossTenant(t *testing.T) {
	b := setup(t)
	owner := "tenant-" + uuid.NewString()[:8]
	ownScope := func() *testfactory.Scope {
		return testfactory.NewScope(b.ctx, t, b.db.Pool, &testfactory.ScopeOpts{TenantID: &owner})
	}
	sDeferred, sFailed, sLive := ownScope(), ownScope(), ownScope()
	res, err := b.repo.Start(b.ctx, b.db.Pool, &repo.StartParams{
		TenantID: owner, KnowledgeSpaceID: sDeferred.KnowledgeSpaceID, DocumentAssetID: sDeferred.DocumentAssetID,
		DocumentVersion: 1, PublicationGenerationID: uuid.New(), Deferred: true,
	})
	require.NoError(t, err)
	deferred := res.Attempt
	testfactory.RequireInvariants(b.ctx, t, b.db.Pool, deferred.ID)
	failed := b.drv.InState(b.ctx, t, sFailed, kfstype.RunStateFailed)
	live := b.drv.InState(b.ctx, t, sLive, kfstype.RunStateQueued)
	sameTenantOtherSpace := ownScope()
	stranger := b.scope(t) // another tenant with a space of its own
	b.clock.Advance(time.Hour)

	type ref struct {
		name   string
		tenant string
		space  uuid.UUID
	}
	refs := []ref{
		{name: "OtherTenantOwnersSpace", tenant: stranger.TenantID, space: sDeferred.KnowledgeSpaceID},
		{name: "OtherTenantOwnSpace", tenant: stranger.TenantID, space: stranger.KnowledgeSpaceID},
		{name: "SameTenantOtherSpace", tenant: owner, space: sameTenantOtherSpace.KnowledgeSpaceID},
	}
	snap := b.snapshot(t, deferred.ID, failed.ID, live.ID)

	for _, r := range refs {
		t.Run(r.name, func(t *testing.T) {
			mk := func(id uuid.UUID) repo.AttemptRef {
				return repo.AttemptRef{TenantID: r.tenant, KnowledgeSpaceID: r.space, AttemptID: id}
			}
			_, err := b.repo.Start(b.ctx, b.db.Pool, &repo.StartParams{
				TenantID: r.tenant, KnowledgeSpaceID: r.space, DocumentAssetID: sLive.DocumentAssetID,
				DocumentVersion: 1, PublicationGenerationID: uuid.New(),
			})
			require.ErrorIs(t, err, repo.ErrNotFound, "Start")
			snap.requireUnchanged(t, b)

			_, err = b.repo.ReleaseDeferred(b.ctx, b.db.Pool, new(mk(deferred.ID)))
			require.ErrorIs(t, err, repo.ErrNotFound, "ReleaseDeferred")
			snap.requireUnchanged(t, b)

			_, err = b.repo.Cancel(b.ctx, b.db.Pool, &repo.CancelParams{AttemptRef: mk(live.ID), Reason: new("x")})
			require.ErrorIs(t, err, repo.ErrNotFound, "Cancel")
			snap.requireUnchanged(t, b)

			_, err = b.repo.Supersede(b.ctx, b.db.Pool, &repo.SupersedeParams{AttemptRef: mk(live.ID), Reason: new("x")})
			require.ErrorIs(t, err, repo.ErrNotFound, "Supersede")
			snap.requireUnchanged(t, b)

			_, err = b.repo.RetryFailed(b.ctx, b.db.Pool, new(mk(failed.ID)))
			require.ErrorIs(t, err, repo.ErrNotFound, "RetryFailed")
			snap.requireUnchanged(t, b)

			list, err := b.repo.ListDocumentVersionAttempts(b.ctx, b.db.Pool, &repo.DocumentVersion{
				TenantID: r.tenant, KnowledgeSpaceID: r.space, DocumentAssetID: sLive.DocumentAssetID, DocumentVersion: 1,
			})
			require.NoError(t, err)
			require.Empty(t, list, "ListDocumentVersionAttempts")

			if r.tenant != owner {
				n, err := b.repo.Purge(b.ctx, b.db.Pool, &repo.PurgeParams{TenantID: r.tenant, CompletedBefore: b.clock.Now().Add(time.Hour)})
				require.NoError(t, err)
				require.Zero(t, n, "Purge")
				snap.requireUnchanged(t, b)

				for _, id := range []uuid.UUID{deferred.ID, failed.ID, live.ID} {
					_, err = b.repo.GetAttempt(b.ctx, b.db.Pool, r.tenant, id)
					require.ErrorIs(t, err, repo.ErrNotFound, "GetAttempt")
					_, _, err = b.repo.GetAttemptWithOutbox(b.ctx, b.db.Pool, r.tenant, id)
					require.ErrorIs(t, err, repo.ErrNotFound, "GetAttemptWithOutbox")
				}

				counts, err := b.repo.CountLiveAttempts(b.ctx, b.db.Pool, r.tenant)
				require.NoError(t, err)
				require.Empty(t, counts, "CountLiveAttempts")
			}
			snap.requireUnchanged(t, b)
		})
	}

	// Paired positive: the owner, in the right space, sees and changes them.
	t.Run("OwnerInRightSpace", func(t *testing.T) {
		for _, r := range snap.rows {
			got, err := b.repo.GetAttempt(b.ctx, b.db.Pool, owner, r.Attempt.ID)
			require.NoError(t, err)
			require.Equal(t, r.Attempt, *got)
			ga, go_, err := b.repo.GetAttemptWithOutbox(b.ctx, b.db.Pool, owner, r.Attempt.ID)
			require.NoError(t, err)
			require.Equal(t, r.Attempt, *ga)
			require.Equal(t, r.Outbox, *go_)
		}
		list, err := b.repo.ListDocumentVersionAttempts(b.ctx, b.db.Pool, &repo.DocumentVersion{
			TenantID: owner, KnowledgeSpaceID: sLive.KnowledgeSpaceID, DocumentAssetID: sLive.DocumentAssetID, DocumentVersion: 1,
		})
		require.NoError(t, err)
		require.Len(t, list, 1)
		counts, err := b.repo.CountLiveAttempts(b.ctx, b.db.Pool, owner)
		require.NoError(t, err)
		require.Equal(t, map[kfstype.RunState]int64{kfstype.RunStateDispatchPending: 1, kfstype.RunStateQueued: 1}, counts)

		_, err = b.repo.ReleaseDeferred(b.ctx, b.db.Pool, new(sDeferred.Ref(deferred.ID)))
		require.NoError(t, err)
		testfactory.RequireInvariants(b.ctx, t, b.db.Pool, deferred.ID)
		_, err = b.repo.Cancel(b.ctx, b.db.Pool, &repo.CancelParams{AttemptRef: sLive.Ref(live.ID)})
		require.NoError(t, err)
		testfactory.RequireInvariants(b.ctx, t, b.db.Pool, live.ID)
		_, err = b.repo.RetryFailed(b.ctx, b.db.Pool, new(sFailed.Ref(failed.ID)))
		require.NoError(t, err)
		testfactory.RequireInvariants(b.ctx, t, b.db.Pool, failed.ID)
		n, err := b.repo.Purge(b.ctx, b.db.Pool, &repo.PurgeParams{TenantID: owner, CompletedBefore: b.clock.Now().Add(time.Hour)})
		require.NoError(t, err)
		require.Equal(t, 1, n) // the canceled one
	})
}

func TestListDocumentVersionAttempts(t *testing.T) {
	t.Parallel()
	t.Run("ListsEveryAttemptOldestFirst", func(t *testing.T) {
		b := setup(t)
		s := b.scope(t)
		var ids []uuid.UUID
		for _, state := range []kfstype.RunState{
			kfstype.RunStateCanceled, kfstype.RunStateFailed, kfstype.RunStateSucceeded, kfstype.RunStateSuperseded,
			kfstype.RunStateRunning,
		} {
			b.clock.Advance(time.Minute)
			ids = append(ids, b.drv.InState(b.ctx, t, s, state).ID)
		}
		// Other document versions do not show up.
		other := b.scope(t)
		b.drv.InState(b.ctx, t, other, kfstype.RunStateDispatchPending)
		otherVersion := testfactory.NewScope(b.ctx, t, b.db.Pool, &testfactory.ScopeOpts{TenantID: &s.TenantID, DocumentVersion: new(int32(2))})
		b.drv.InState(b.ctx, t, otherVersion, kfstype.RunStateDispatchPending)

		got, err := b.repo.ListDocumentVersionAttempts(b.ctx, b.db.Pool, &repo.DocumentVersion{
			TenantID: s.TenantID, KnowledgeSpaceID: s.KnowledgeSpaceID, DocumentAssetID: s.DocumentAssetID, DocumentVersion: s.DocumentVersion,
		})
		require.NoError(t, err)
		require.Len(t, got, len(ids))
		for i, id := range ids {
			require.Equal(t, testfactory.RequireInvariants(b.ctx, t, b.db.Pool, id).Attempt, *got[i])
		}
	})

	t.Run("ListsNothingForUnknownVersion", func(t *testing.T) {
		b := setup(t)
		s := b.scope(t)
		b.drv.InState(b.ctx, t, s, kfstype.RunStateDispatchPending)
		got, err := b.repo.ListDocumentVersionAttempts(b.ctx, b.db.Pool, &repo.DocumentVersion{
			TenantID: s.TenantID, KnowledgeSpaceID: s.KnowledgeSpaceID, DocumentAssetID: s.DocumentAssetID, DocumentVersion: 2,
		})
		require.NoError(t, err)
		require.Empty(t, got)
	})

	t.Run("ValidatesInput", func(t *testing.T) {
		b := setup(t)
		s := b.scope(t)
		for _, tc := range []struct {
			field string
			edit  func(*repo.DocumentVersion)
		}{
			{"TenantID", func(d *repo.DocumentVersion) { d.TenantID = "" }},
			{"KnowledgeSpaceID", func(d *repo.DocumentVersion) { d.KnowledgeSpaceID = uuid.Nil }},
			{"DocumentAssetID", func(d *repo.DocumentVersion) { d.DocumentAssetID = uuid.Nil }},
			{"DocumentVersion", func(d *repo.DocumentVersion) { d.DocumentVersion = 0 }},
		} {
			dv := &repo.DocumentVersion{TenantID: s.TenantID, KnowledgeSpaceID: s.KnowledgeSpaceID, DocumentAssetID: s.DocumentAssetID, DocumentVersion: 1}
			tc.edit(dv)
			_, err := b.repo.ListDocumentVersionAttempts(b.ctx, b.db.Pool, dv)
			requireInputError(t, err, tc.field)
		}
	})
}

func TestCountLiveAttempts(t *testing.T) {
	t.Parallel()
	t.Run("CountsLiveAttemptsPerRunState", func(t *testing.T) {
		b := setup(t)
		tenant := "tenant-" + uuid.NewString()[:8]
		states := []kfstype.RunState{
			kfstype.RunStateDispatchPending, kfstype.RunStateDispatchPending, kfstype.RunStateQueued,
			kfstype.RunStateRunning, kfstype.RunStateRetryWait, kfstype.RunStateRetryWait, kfstype.RunStateRetryWait,
			// Terminal ones are not counted.
			kfstype.RunStateSucceeded, kfstype.RunStateFailed, kfstype.RunStateCanceled, kfstype.RunStateSuperseded,
		}
		for _, state := range states {
			s := testfactory.NewScope(b.ctx, t, b.db.Pool, &testfactory.ScopeOpts{TenantID: &tenant})
			b.drv.InState(b.ctx, t, s, state)
		}
		b.drv.InState(b.ctx, t, b.scope(t), kfstype.RunStateQueued) // another tenant

		counts, err := b.repo.CountLiveAttempts(b.ctx, b.db.Pool, tenant)
		require.NoError(t, err)
		require.Equal(t, map[kfstype.RunState]int64{
			kfstype.RunStateDispatchPending: 2,
			kfstype.RunStateQueued:          1,
			kfstype.RunStateRunning:         1,
			kfstype.RunStateRetryWait:       3,
		}, counts)
	})

	t.Run("CountsNothingForTenantWithoutAttempts", func(t *testing.T) {
		b := setup(t)
		counts, err := b.repo.CountLiveAttempts(b.ctx, b.db.Pool, "nobody")
		require.NoError(t, err)
		require.Empty(t, counts)
		_, err = b.repo.CountLiveAttempts(b.ctx, b.db.Pool, "")
		requireInputError(t, err, "TenantID")
	})
}
