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

func TestComplete(t *testing.T) {
	t.Parallel()

	t.Run("CompletesAtSmokeEvalPassed", func(t *testing.T) {
		b := setup(t)
		_, lease, _ := b.drv.Running(b.ctx, t, b.scope(t), &testfactory.RunningOpts{Checkpoint: new(kfstype.CheckpointSmokeEvalPassed)})
		b.clock.Advance(5 * time.Second)
		before := b.rows(t, lease.AttemptID)
		got, err := b.repo.Complete(b.ctx, b.db.Pool, &repo.CompleteParams{Lease: lease})
		require.NoError(t, err)
		want := testfactory.ExpectEnded(before, kfstype.RunStateSucceeded, kfstype.OutboxStatusCompleted, b.clock.Now())
		want.Attempt.Checkpoint = kfstype.CheckpointPublished
		require.Equal(t, want, b.rows(t, lease.AttemptID))
		require.Equal(t, want.Attempt, *got)
	})

	for _, cp := range []kfstype.Checkpoint{kfstype.CheckpointQueued, kfstype.CheckpointNodesGenerated, kfstype.CheckpointProjectionBuilt} {
		t.Run("RejectsCheckpoint_"+string(cp), func(t *testing.T) {
			b := setup(t)
			s := b.scope(t)
			_, lease, _ := b.drv.Running(b.ctx, t, s, nil)
			if cp != kfstype.CheckpointQueued {
				b.drv.AdvanceTo(b.ctx, t, s, lease, cp)
			}
			before := b.rows(t, lease.AttemptID)
			got, err := b.repo.Complete(b.ctx, b.db.Pool, &repo.CompleteParams{Lease: lease})
			var te *repo.TransitionError
			require.ErrorAs(t, err, &te)
			require.Equal(t, cp, te.Checkpoint)
			require.Equal(t, kfstype.RunStateSucceeded, te.To)
			require.Nil(t, got)
			b.requireUnchanged(t, before)
		})
	}

	t.Run("RejectsInvalidLease", func(t *testing.T) {
		b := setup(t)
		_, lease, _ := b.drv.Running(b.ctx, t, b.scope(t), nil)
		before := b.rows(t, lease.AttemptID)
		_, err := b.repo.Complete(b.ctx, b.db.Pool, &repo.CompleteParams{Lease: nil})
		requireInputError(t, err, "Lease")
		_, err = b.repo.Complete(b.ctx, b.db.Pool, &repo.CompleteParams{Lease: &repo.Lease{AttemptID: lease.AttemptID, WorkerID: lease.WorkerID}})
		requireInputError(t, err, "Lease.Token")
		b.requireUnchanged(t, before)
	})
}

// TestCompleteThrough: a running attempt at any checkpoint ends succeeded
// at published in one write, binding the candidate given if none is bound;
// every refusal leaves both rows as they were.
func TestCompleteThrough(t *testing.T) {
	t.Parallel()

	type candidate = rwCandidate
	fresh := func(t *testing.T, b *testBundle, s *testfactory.Scope, _ candidate) candidate {
		return b.rwPub(t, s, "candidate")
	}
	bound := func(t *testing.T, b *testBundle, s *testfactory.Scope, bound candidate) candidate { return bound }
	isRejected := func(t *testing.T, err error) {
		require.ErrorIs(t, err, repo.ErrCandidateRejected)
		require.NotErrorIs(t, err, repo.ErrInvalidTransition)
		require.NotErrorIs(t, err, repo.ErrLeaseLost)
	}
	isInput := func(field string) func(*testing.T, error) {
		return func(t *testing.T, err error) { requireInputError(t, err, field) }
	}

	for _, tc := range []struct {
		name string
		from kfstype.Checkpoint
		// bindEarly binds a candidate at from (below projection_built)
		// before the call.
		bindEarly bool
		cand      func(t *testing.T, b *testBundle, s *testfactory.Scope, bound candidate) candidate // nil: none given
		check     func(t *testing.T, err error)                                                      // nil: succeeds
		binds     bool                                                                               // success binds cand
	}{
		{name: "CompletesFromQueuedBindingCandidate", from: kfstype.CheckpointQueued, cand: fresh, binds: true},
		{name: "CompletesFromParsedBindingCandidate", from: kfstype.CheckpointParsed, cand: fresh, binds: true},
		{name: "CompletesFromOutlineBuiltBindingCandidate", from: kfstype.CheckpointOutlineBuilt, cand: fresh, binds: true},
		{name: "CompletesFromNodesGeneratedBindingCandidate", from: kfstype.CheckpointNodesGenerated, cand: fresh, binds: true},
		{name: "CompletesFromProjectionBuiltWithBoundCandidate", from: kfstype.CheckpointProjectionBuilt},
		{name: "CompletesFromSmokeEvalPassedWithBoundCandidate", from: kfstype.CheckpointSmokeEvalPassed},
		{name: "CompletesFromParsedWithCandidateBoundEarlier", from: kfstype.CheckpointParsed, bindEarly: true},
		{name: "AcceptsSameCandidateAgain", from: kfstype.CheckpointSmokeEvalPassed, cand: bound},
		{name: "AcceptsSameCandidateAgainBoundEarlier", from: kfstype.CheckpointQueued, bindEarly: true, cand: bound},
		{name: "RejectsDifferentCandidate", from: kfstype.CheckpointSmokeEvalPassed, cand: fresh, check: isRejected},
		{name: "RejectsDifferentCandidateBoundEarlier", from: kfstype.CheckpointParsed, bindEarly: true, cand: fresh, check: isRejected},
		{name: "RejectsNoCandidateFromQueued", from: kfstype.CheckpointQueued, check: isRejected},
		{name: "RejectsNoCandidateFromNodesGenerated", from: kfstype.CheckpointNodesGenerated, check: isRejected},
		{name: "RejectsCandidateOfAnotherTenant", from: kfstype.CheckpointNodesGenerated, check: isRejected,
			cand: func(t *testing.T, b *testBundle, _ *testfactory.Scope, _ candidate) candidate {
				return b.rwPub(t, b.scope(t), "candidate")
			}},
		{name: "RejectsCandidateOfAnotherSpace", from: kfstype.CheckpointQueued, check: isRejected,
			cand: func(t *testing.T, b *testBundle, s *testfactory.Scope, _ candidate) candidate {
				other := testfactory.NewScope(b.ctx, t, b.db.Pool, &testfactory.ScopeOpts{TenantID: &s.TenantID})
				return b.rwPub(t, other, "candidate")
			}},
		{name: "RejectsValidatingPublication", from: kfstype.CheckpointParsed, check: isRejected,
			cand: func(t *testing.T, b *testBundle, s *testfactory.Scope, _ candidate) candidate {
				return b.rwPub(t, s, "validating")
			}},
		{name: "RejectsPublishedPublication", from: kfstype.CheckpointParsed, check: isRejected,
			cand: func(t *testing.T, b *testBundle, s *testfactory.Scope, _ candidate) candidate {
				return b.rwPub(t, s, "published")
			}},
		{name: "RejectsFingerprintOfAnotherPublication", from: kfstype.CheckpointQueued, check: isRejected,
			cand: func(t *testing.T, b *testBundle, s *testfactory.Scope, _ candidate) candidate {
				c, other := b.rwPub(t, s, "candidate"), b.rwPub(t, s, "candidate")
				return candidate{c.id, other.fp}
			}},
		{name: "RejectsBoundIDWithAnotherFingerprint", from: kfstype.CheckpointSmokeEvalPassed, check: isRejected,
			cand: func(t *testing.T, b *testBundle, s *testfactory.Scope, bound candidate) candidate {
				return candidate{bound.id, b.rwPub(t, s, "candidate").fp}
			}},
		{name: "RejectsUnknownPublication", from: kfstype.CheckpointQueued, check: isRejected,
			cand: func(t *testing.T, b *testBundle, s *testfactory.Scope, _ candidate) candidate {
				return candidate{new(uuid.New()), new(testfactory.Fingerprint("nowhere"))}
			}},
		{name: "RejectsIDWithoutFingerprint", from: kfstype.CheckpointQueued, check: isInput("CandidatePublicationID"),
			cand: func(t *testing.T, b *testBundle, s *testfactory.Scope, _ candidate) candidate {
				return candidate{b.rwPub(t, s, "candidate").id, nil}
			}},
		{name: "RejectsFingerprintWithoutID", from: kfstype.CheckpointSmokeEvalPassed, check: isInput("CandidatePublicationID"),
			cand: func(t *testing.T, b *testBundle, s *testfactory.Scope, bound candidate) candidate {
				return candidate{nil, bound.fp}
			}},
		{name: "RejectsNilUUID", from: kfstype.CheckpointQueued, check: isInput("CandidatePublicationID"),
			cand: func(t *testing.T, b *testBundle, s *testfactory.Scope, _ candidate) candidate {
				return candidate{new(uuid.Nil), b.rwPub(t, s, "candidate").fp}
			}},
		{name: "RejectsUppercaseFingerprint", from: kfstype.CheckpointQueued, check: isInput("CandidateFingerprint"),
			cand: func(t *testing.T, b *testBundle, s *testfactory.Scope, _ candidate) candidate {
				return candidate{b.rwPub(t, s, "candidate").id, new("projection-set-sha256:" + strings.Repeat("A", 64))}
			}},
		{name: "RejectsShortFingerprint", from: kfstype.CheckpointQueued, check: isInput("CandidateFingerprint"),
			cand: func(t *testing.T, b *testBundle, s *testfactory.Scope, _ candidate) candidate {
				c := b.rwPub(t, s, "candidate")
				return candidate{c.id, new((*c.fp)[:85])}
			}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := setup(t)
			s := b.scope(t)
			_, lease, _ := b.drv.Running(b.ctx, t, s, nil)
			if tc.from != kfstype.CheckpointQueued {
				b.drv.AdvanceTo(b.ctx, t, s, lease, tc.from)
			}
			if tc.bindEarly {
				b.rwBindEarly(t, s, lease)
			}
			b.clock.Advance(5 * time.Second)
			before := b.rows(t, lease.AttemptID)
			require.Equal(t, tc.from, before.Attempt.Checkpoint)
			var c candidate
			if tc.cand != nil {
				c = tc.cand(t, b, s, candidate{before.Attempt.CandidatePublicationID, before.Attempt.CandidateFingerprint})
			}
			got, err := b.repo.CompleteThrough(b.ctx, b.db.Pool, &repo.CompleteThroughParams{
				Lease: lease, CandidatePublicationID: c.id, CandidateFingerprint: c.fp,
			})
			if tc.check != nil {
				tc.check(t, err)
				require.Nil(t, got)
				b.requireUnchanged(t, before)
				return
			}
			require.NoError(t, err)
			want := testfactory.ExpectEnded(before, kfstype.RunStateSucceeded, kfstype.OutboxStatusCompleted, b.clock.Now())
			want.Attempt.Checkpoint = kfstype.CheckpointPublished
			if tc.binds {
				require.Nil(t, before.Attempt.CandidatePublicationID)
				want.Attempt.CandidatePublicationID, want.Attempt.CandidateFingerprint = c.id, c.fp
			} else {
				require.NotNil(t, before.Attempt.CandidatePublicationID, "the bound candidate is kept")
			}
			require.Equal(t, want, b.rows(t, lease.AttemptID))
			require.Equal(t, want.Attempt, *got)
		})
	}

	t.Run("SameAsAdvanceToThenComplete", func(t *testing.T) {
		// The same attempt walked both ways ends in the same rows, but
		// for the ids, job ids, lease and row_version (one write, not two).
		b := setup(t)
		walk := func(through bool) *testfactory.Rows {
			s := b.scope(t)
			_, lease, _ := b.drv.Running(b.ctx, t, s, &testfactory.RunningOpts{Checkpoint: new(kfstype.CheckpointParsed)})
			c := b.rwPub(t, s, "candidate")
			if through {
				_, err := b.repo.CompleteThrough(b.ctx, b.db.Pool, &repo.CompleteThroughParams{Lease: lease, CandidatePublicationID: c.id, CandidateFingerprint: c.fp})
				require.NoError(t, err)
			} else {
				_, err := b.repo.AdvanceTo(b.ctx, b.db.Pool, &repo.AdvanceToParams{Lease: lease, Checkpoint: kfstype.CheckpointSmokeEvalPassed, CandidatePublicationID: c.id, CandidateFingerprint: c.fp})
				require.NoError(t, err)
				_, err = b.repo.Complete(b.ctx, b.db.Pool, &repo.CompleteParams{Lease: lease})
				require.NoError(t, err)
			}
			r := b.rows(t, lease.AttemptID)
			require.Equal(t, *c.id, *r.Attempt.CandidatePublicationID)
			return r
		}
		two, one := walk(false), walk(true)
		require.Equal(t, two.Attempt.RowVersion-1, one.Attempt.RowVersion)
		// Normalize what differs by construction.
		norm := func(r *testfactory.Rows) {
			a, o := &r.Attempt, &r.Outbox
			a.ID, a.TenantID, a.KnowledgeSpaceID, a.DocumentAssetID, a.PublicationGenerationID = uuid.Nil, "", uuid.Nil, uuid.Nil, uuid.Nil
			a.CandidatePublicationID, a.CandidateFingerprint, a.QueueJobID, a.RowVersion = nil, nil, nil, 0
			o.ID, o.AttemptID, o.Payload, o.IdempotencyKey, o.QueueJobID = uuid.Nil, uuid.Nil, nil, "", nil
		}
		norm(two)
		norm(one)
		require.Equal(t, two, one)
	})

	t.Run("RejectsInvalidLease", func(t *testing.T) {
		b := setup(t)
		s := b.scope(t)
		_, lease, _ := b.drv.Running(b.ctx, t, s, nil)
		c := b.rwPub(t, s, "candidate")
		before := b.rows(t, lease.AttemptID)
		for _, tc := range []struct {
			field string
			p     repo.CompleteThroughParams
		}{
			{"Lease", repo.CompleteThroughParams{CandidatePublicationID: c.id, CandidateFingerprint: c.fp}},
			{"Lease.Token", repo.CompleteThroughParams{Lease: &repo.Lease{AttemptID: lease.AttemptID, WorkerID: lease.WorkerID}, CandidatePublicationID: c.id, CandidateFingerprint: c.fp}},
			{"Lease.WorkerID", repo.CompleteThroughParams{Lease: &repo.Lease{AttemptID: lease.AttemptID, Token: lease.Token}, CandidatePublicationID: c.id, CandidateFingerprint: c.fp}},
			{"Lease.AttemptID", repo.CompleteThroughParams{Lease: &repo.Lease{WorkerID: lease.WorkerID, Token: lease.Token}, CandidatePublicationID: c.id, CandidateFingerprint: c.fp}},
		} {
			got, err := b.repo.CompleteThrough(b.ctx, b.db.Pool, &tc.p)
			requireInputError(t, err, tc.field)
			require.Nil(t, got)
			b.requireUnchanged(t, before)
		}
	})

	t.Run("RejectsUnknownAttempt", func(t *testing.T) {
		b := setup(t)
		s := b.scope(t)
		_, lease, _ := b.drv.Running(b.ctx, t, s, nil)
		c := b.rwPub(t, s, "candidate")
		before := b.rows(t, lease.AttemptID)
		l := *lease
		l.AttemptID = uuid.New()
		_, err := b.repo.CompleteThrough(b.ctx, b.db.Pool, &repo.CompleteThroughParams{Lease: &l, CandidatePublicationID: c.id, CandidateFingerprint: c.fp})
		require.ErrorIs(t, err, repo.ErrNotFound)
		b.requireUnchanged(t, before)
	})
}
