package repo_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/knowledgefs/kfsdb/kfstype"
	"github.com/knowledgefs/kfsdb/repo"
	"github.com/knowledgefs/kfsdb/tests/testfactory"
)

func TestReleaseDeferred(t *testing.T) {
	t.Parallel()

	startDeferred := func(t *testing.T, b *testBundle, s *testfactory.Scope) *kfstype.Attempt {
		t.Helper()
		p := s.StartParams()
		p.Deferred = true
		res, err := b.repo.Start(b.ctx, b.db.Pool, p)
		require.NoError(t, err)
		require.True(t, res.Created)
		got := testfactory.RequireInvariants(b.ctx, t, b.db.Pool, res.Attempt.ID)
		require.Equal(t, testfactory.ExpectStarted(got, p, repo.MaxExecutionAttemptsDefault, b.clock.Now(), kfstype.Forever), got)
		require.Equal(t, got.Attempt, *res.Attempt)
		return res.Attempt
	}

	released := func(before *testfactory.Rows, now time.Time) testfactory.Rows {
		want := *before
		want.Attempt.RowVersion++
		want.Attempt.UpdatedAt = now
		want.Outbox.AvailableAt = now
		want.Outbox.UpdatedAt = now
		return want
	}

	t.Run("DeferredStartIsNotClaimable", func(t *testing.T) {
		b := setup(t)
		a := startDeferred(t, b, b.scope(t))
		snap := b.snapshot(t, a.ID)
		b.clock.Advance(365 * 24 * time.Hour)
		require.False(t, ctlClaimable(t, b, a.ID))
		snap.requireUnchanged(t, b)
	})

	t.Run("MakesDeferredStartDueNow", func(t *testing.T) {
		b := setup(t)
		s := b.scope(t)
		a := startDeferred(t, b, s)
		before := testfactory.ReadRows(b.ctx, t, b.db.Pool, a.ID)
		now := b.clock.Advance(time.Hour)
		got, err := b.repo.ReleaseDeferred(b.ctx, b.db.Pool, &repo.ReleaseDeferredParams{AttemptRef: s.Ref(a.ID)})
		require.NoError(t, err)
		after := testfactory.RequireInvariants(b.ctx, t, b.db.Pool, a.ID)
		require.Equal(t, released(before, now), *after)
		require.Equal(t, after.Attempt, *got)
		require.True(t, ctlClaimable(t, b, a.ID))
	})

	t.Run("ReleasesAtExpectedRowVersion", func(t *testing.T) {
		b := setup(t)
		s := b.scope(t)
		a := startDeferred(t, b, s)
		before := testfactory.ReadRows(b.ctx, t, b.db.Pool, a.ID)
		now := b.clock.Advance(time.Hour)
		ref := s.Ref(a.ID)
		ref.ExpectedRowVersion = new(int32(0))
		_, err := b.repo.ReleaseDeferred(b.ctx, b.db.Pool, &repo.ReleaseDeferredParams{AttemptRef: ref})
		require.NoError(t, err)
		require.Equal(t, released(before, now), *testfactory.RequireInvariants(b.ctx, t, b.db.Pool, a.ID))
	})

	t.Run("RefusesStartThatWasNotDeferred", func(t *testing.T) {
		b := setup(t)
		s := b.scope(t)
		a := b.drv.InState(b.ctx, t, s, kfstype.RunStateDispatchPending)
		snap := b.snapshot(t, a.ID)
		b.clock.Advance(time.Hour)
		_, err := b.repo.ReleaseDeferred(b.ctx, b.db.Pool, &repo.ReleaseDeferredParams{AttemptRef: s.Ref(a.ID)})
		ctlRequireTransitionError(t, err, kfstype.RunStateDispatchPending)
		snap.requireUnchanged(t, b)
	})

	t.Run("RefusesSecondRelease", func(t *testing.T) {
		b := setup(t)
		s := b.scope(t)
		a := startDeferred(t, b, s)
		_, err := b.repo.ReleaseDeferred(b.ctx, b.db.Pool, &repo.ReleaseDeferredParams{AttemptRef: s.Ref(a.ID)})
		require.NoError(t, err)
		testfactory.RequireInvariants(b.ctx, t, b.db.Pool, a.ID)
		snap := b.snapshot(t, a.ID)
		b.clock.Advance(time.Hour)
		_, err = b.repo.ReleaseDeferred(b.ctx, b.db.Pool, &repo.ReleaseDeferredParams{AttemptRef: s.Ref(a.ID)})
		ctlRequireTransitionError(t, err, kfstype.RunStateDispatchPending)
		snap.requireUnchanged(t, b)
	})

	for _, state := range []kfstype.RunState{kfstype.RunStateQueued, kfstype.RunStateCanceled, kfstype.RunStateSuperseded} {
		t.Run("Refuses"+ctlStateName(state)+"Attempt", func(t *testing.T) {
			b := setup(t)
			s := b.scope(t)
			var a *kfstype.Attempt
			switch state {
			case kfstype.RunStateQueued:
				a = b.drv.InState(b.ctx, t, s, state)
			case kfstype.RunStateCanceled, kfstype.RunStateSuperseded:
				// Ended while still deferred.
				a = startDeferred(t, b, s)
				op := map[kfstype.RunState]ctlEndOp{kfstype.RunStateCanceled: ctlCancel, kfstype.RunStateSuperseded: ctlSupersede}[state]
				_, err := op.call(b, s.Ref(a.ID), nil)
				require.NoError(t, err)
				r := testfactory.RequireInvariants(b.ctx, t, b.db.Pool, a.ID)
				require.Equal(t, kfstype.Forever, r.Outbox.AvailableAt)
			}
			snap := b.snapshot(t, a.ID)
			b.clock.Advance(time.Hour)
			_, err := b.repo.ReleaseDeferred(b.ctx, b.db.Pool, &repo.ReleaseDeferredParams{AttemptRef: s.Ref(a.ID)})
			ctlRequireTransitionError(t, err, state)
			snap.requireUnchanged(t, b)
		})
	}

	ctlRefRefusals(t, ctlRefOp{
		ready: startDeferred,
		call: func(b *testBundle, ref repo.AttemptRef) error {
			_, err := b.repo.ReleaseDeferred(b.ctx, b.db.Pool, &repo.ReleaseDeferredParams{AttemptRef: ref})
			return err
		},
		// A refused release leaves the start deferred.
		still: func(t *testing.T, b *testBundle, a *kfstype.Attempt) { require.False(t, ctlClaimable(t, b, a.ID)) },
	})
}
