package repo_test

import (
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/knowledgefs/kfsdb/kfstype"
	"github.com/knowledgefs/kfsdb/repo"
	"github.com/knowledgefs/kfsdb/tests/testfactory"
)

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

// ctlRefOp is a control-plane call that names its attempt by an AttemptRef
// (Cancel, Supersede, ReleaseDeferred, RetryFailed). They refuse a stale
// row version, an unknown attempt and a malformed ref alike, whatever the
// attempt's state, so ctlRefRefusals checks that once for all of them.
type ctlRefOp struct {
	// ready builds an attempt the call would otherwise change.
	ready func(t *testing.T, b *testBundle, s *testfactory.Scope) *kfstype.Attempt
	call  func(b *testBundle, ref repo.AttemptRef) error
	// still, if set, checks more of what a refusal must leave as it was.
	still func(t *testing.T, b *testBundle, a *kfstype.Attempt)
}

// ctlRefRefusals runs op's refusals as subtests of t; none may change
// anything anywhere.
func ctlRefRefusals(t *testing.T, op ctlRefOp) {
	// ready builds the attempt and returns the check that a refusal left
	// everything as it was.
	ready := func(t *testing.T) (*testBundle, *testfactory.Scope, *kfstype.Attempt, func()) {
		b := setup(t)
		s := b.scope(t)
		a := op.ready(t, b, s)
		snap := b.snapshot(t, a.ID)
		b.clock.Advance(time.Minute)
		return b, s, a, func() {
			snap.requireUnchanged(t, b)
			if op.still != nil {
				op.still(t, b, a)
			}
		}
	}

	t.Run("RefusesStaleRowVersion", func(t *testing.T) {
		b, s, a, unchanged := ready(t)
		// One version behind (when there is one) and one ahead.
		for _, v := range []int32{a.RowVersion - 1, a.RowVersion + 1} {
			if v < 0 {
				continue
			}
			ref := s.Ref(a.ID)
			ref.ExpectedRowVersion = new(v)
			require.ErrorIs(t, op.call(b, ref), repo.ErrStaleRowVersion, "expected row version %d", v)
			unchanged()
		}
	})

	t.Run("RefusesUnknownAttempt", func(t *testing.T) {
		b, s, _, unchanged := ready(t)
		require.ErrorIs(t, op.call(b, s.Ref(uuid.New())), repo.ErrNotFound)
		unchanged()
	})

	t.Run("ValidatesInput", func(t *testing.T) {
		b, s, a, unchanged := ready(t)
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
			requireInputError(t, op.call(b, ref), tc.field)
			unchanged()
		}
	})
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
				require.Equal(t, testfactory.ExpectControlEnded(before, op.state, op.code, reason, now), after)
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
		require.Equal(t, testfactory.ExpectControlEnded(before, op.state, op.code, nil, now), after)
		require.Equal(t, after.Attempt, *got)
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

	t.Run("KillsTheWorkersLease", func(t *testing.T) {
		b := setup(t)
		s := b.scope(t)
		a, lease, _ := b.drv.Running(b.ctx, t, s, nil)
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
			require.Equal(t, testfactory.ExpectControlEnded(before, op.state, op.code, nil, now), after)

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
			msgs, err := b.repo.ClaimOutbox(b.ctx, b.db.Pool, &repo.ClaimOutboxParams{RelayID: "relay-2", BatchSize: 100})
			require.NoError(t, err)
			require.Empty(t, msgs)
			snap.requireUnchanged(t, b)
		})
	}

	ctlRefRefusals(t, ctlRefOp{
		ready: func(t *testing.T, b *testBundle, s *testfactory.Scope) *kfstype.Attempt {
			return b.drv.InState(b.ctx, t, s, kfstype.RunStateQueued)
		},
		call: func(b *testBundle, ref repo.AttemptRef) error {
			_, err := op.call(b, ref, nil)
			return err
		},
	})
}
