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

// advanceImpls are the two checkpoint writes: Advance (one step) and
// AdvanceTo (any number of steps forward).
var advanceImpls = []struct {
	name string
	call func(b *testBundle, p *repo.AdvanceParams) (*kfstype.Attempt, error)
}{
	{"Advance", func(b *testBundle, p *repo.AdvanceParams) (*kfstype.Attempt, error) {
		return b.repo.Advance(b.ctx, b.db.Pool, p)
	}},
	{"AdvanceTo", func(b *testBundle, p *repo.AdvanceParams) (*kfstype.Attempt, error) {
		return b.repo.AdvanceTo(b.ctx, b.db.Pool, (*repo.AdvanceToParams)(p))
	}},
}

// TestAdvance runs every case against Advance and AdvanceTo: their
// candidate rules are the same, and they differ only in how far forward
// the checkpoint may move (advanceTo says what AdvanceTo does instead).
func TestAdvance(t *testing.T) {
	t.Parallel()

	type candidate = rwCandidate
	pub := func(t *testing.T, b *testBundle, s *testfactory.Scope, status string) candidate {
		return b.rwPub(t, s, status)
	}
	// isTransitionError requires a *TransitionError that reports the
	// attempt still running at checkpoint from.
	isTransitionError := func(from kfstype.Checkpoint) func(t *testing.T, err error) {
		return func(t *testing.T, err error) {
			var te *repo.TransitionError
			require.ErrorAs(t, err, &te)
			require.ErrorIs(t, err, repo.ErrInvalidTransition)
			require.Equal(t, kfstype.RunStateRunning, te.From)
			require.Equal(t, from, te.Checkpoint)
			require.NotNil(t, te.Attempt)
		}
	}
	isRejected := func(t *testing.T, err error) {
		require.ErrorIs(t, err, repo.ErrCandidateRejected)
		require.NotErrorIs(t, err, repo.ErrInvalidTransition)
	}
	isInput := func(field string) func(*testing.T, error) {
		return func(t *testing.T, err error) { requireInputError(t, err, field) }
	}
	upperFP := "projection-set-sha256:" + strings.Repeat("A", 64)
	fresh := func(t *testing.T, b *testBundle, s *testfactory.Scope, _ candidate) candidate {
		return pub(t, b, s, "candidate")
	}
	bound := func(t *testing.T, b *testBundle, s *testfactory.Scope, bound candidate) candidate { return bound }

	// outcome is what a call does: check (nil: it succeeds) and, on
	// success, whether it binds the candidate given.
	type outcome struct {
		check func(t *testing.T, err error)
		binds bool
	}
	for _, impl := range advanceImpls {
		t.Run(impl.name, func(t *testing.T) {
			t.Parallel()
			for _, tc := range []struct {
				name string
				from kfstype.Checkpoint
				// bindEarly binds a candidate at from before the call
				// (from is below projection_built).
				bindEarly bool
				to        kfstype.Checkpoint
				cand      func(t *testing.T, b *testBundle, s *testfactory.Scope, bound candidate) candidate
				check     func(t *testing.T, err error) // nil: succeeds
				binds     bool                          // success binds cand
				// advanceTo, when set, is AdvanceTo's outcome, which
				// differs from Advance's (check and binds).
				advanceTo *outcome
			}{
				{name: "StaysAtSameCheckpoint", from: kfstype.CheckpointParsed, to: kfstype.CheckpointParsed},
				{name: "StaysAtQueued", from: kfstype.CheckpointQueued, to: kfstype.CheckpointQueued},
				{name: "StaysAtSmokeEvalPassed", from: kfstype.CheckpointSmokeEvalPassed, to: kfstype.CheckpointSmokeEvalPassed},
				{name: "MovesOneStep", from: kfstype.CheckpointParsed, to: kfstype.CheckpointOutlineBuilt},
				{name: "MovesFromQueued", from: kfstype.CheckpointQueued, to: kfstype.CheckpointParsed},
				{name: "MovesOneStepToSmokeEvalPassed", from: kfstype.CheckpointProjectionBuilt, to: kfstype.CheckpointSmokeEvalPassed},
				{name: "SkipsQueuedToOutlineBuilt", from: kfstype.CheckpointQueued, to: kfstype.CheckpointOutlineBuilt,
					check: isTransitionError(kfstype.CheckpointQueued), advanceTo: &outcome{}},
				{name: "SkipsQueuedToNodesGenerated", from: kfstype.CheckpointQueued, to: kfstype.CheckpointNodesGenerated,
					check: isTransitionError(kfstype.CheckpointQueued), advanceTo: &outcome{}},
				{name: "SkipsQueuedToSmokeEvalPassedBindingCandidate", from: kfstype.CheckpointQueued, to: kfstype.CheckpointSmokeEvalPassed, cand: fresh,
					check: isTransitionError(kfstype.CheckpointQueued), advanceTo: &outcome{binds: true}},
				{name: "SkipsParsedToProjectionBuiltBindingCandidate", from: kfstype.CheckpointParsed, to: kfstype.CheckpointProjectionBuilt, cand: fresh,
					check: isTransitionError(kfstype.CheckpointParsed), advanceTo: &outcome{binds: true}},
				{name: "SkipsPastProjectionBuiltWithCandidateBoundEarlier", from: kfstype.CheckpointOutlineBuilt, bindEarly: true, to: kfstype.CheckpointSmokeEvalPassed,
					check: isTransitionError(kfstype.CheckpointOutlineBuilt), advanceTo: &outcome{}},
				{name: "SkipsWithSameCandidateAgain", from: kfstype.CheckpointParsed, bindEarly: true, to: kfstype.CheckpointSmokeEvalPassed, cand: bound,
					check: isTransitionError(kfstype.CheckpointParsed), advanceTo: &outcome{}},
				{name: "SkipsToProjectionBuiltWithoutCandidate", from: kfstype.CheckpointParsed, to: kfstype.CheckpointProjectionBuilt,
					check: isTransitionError(kfstype.CheckpointParsed), advanceTo: &outcome{check: isRejected}},
				{name: "SkipsQueuedToSmokeEvalPassedWithoutCandidate", from: kfstype.CheckpointQueued, to: kfstype.CheckpointSmokeEvalPassed,
					check: isTransitionError(kfstype.CheckpointQueued), advanceTo: &outcome{check: isRejected}},
				{name: "SkipsWithDifferentCandidate", from: kfstype.CheckpointParsed, bindEarly: true, to: kfstype.CheckpointSmokeEvalPassed, cand: fresh,
					check: isTransitionError(kfstype.CheckpointParsed), advanceTo: &outcome{check: isRejected}},
				{name: "SkipsWithCandidateOfAnotherTenant", from: kfstype.CheckpointQueued, to: kfstype.CheckpointProjectionBuilt,
					cand: func(t *testing.T, b *testBundle, _ *testfactory.Scope, _ candidate) candidate {
						return pub(t, b, b.scope(t), "candidate")
					},
					check: isTransitionError(kfstype.CheckpointQueued), advanceTo: &outcome{check: isRejected}},
				{name: "SkipsWithValidatingPublication", from: kfstype.CheckpointQueued, to: kfstype.CheckpointSmokeEvalPassed,
					cand: func(t *testing.T, b *testBundle, s *testfactory.Scope, _ candidate) candidate {
						return pub(t, b, s, "validating")
					},
					check: isTransitionError(kfstype.CheckpointQueued), advanceTo: &outcome{check: isRejected}},
				{name: "RejectsBackwards", from: kfstype.CheckpointOutlineBuilt, to: kfstype.CheckpointParsed, check: isTransitionError(kfstype.CheckpointOutlineBuilt)},
				{name: "RejectsBackwardsToQueued", from: kfstype.CheckpointParsed, to: kfstype.CheckpointQueued, check: isTransitionError(kfstype.CheckpointParsed)},
				{name: "RejectsBackwardsSeveralSteps", from: kfstype.CheckpointSmokeEvalPassed, to: kfstype.CheckpointParsed, check: isTransitionError(kfstype.CheckpointSmokeEvalPassed)},
				{name: "RejectsBackwardsWithBoundCandidate", from: kfstype.CheckpointSmokeEvalPassed, to: kfstype.CheckpointProjectionBuilt, cand: bound,
					check: isTransitionError(kfstype.CheckpointSmokeEvalPassed)},
				{name: "RejectsBackwardsWithDifferentCandidate", from: kfstype.CheckpointSmokeEvalPassed, to: kfstype.CheckpointNodesGenerated, cand: fresh,
					check: isTransitionError(kfstype.CheckpointSmokeEvalPassed)},
				{name: "RejectsPublished", from: kfstype.CheckpointSmokeEvalPassed, to: kfstype.CheckpointPublished, check: isInput("Checkpoint")},
				{name: "RejectsPublishedFromQueued", from: kfstype.CheckpointQueued, to: kfstype.CheckpointPublished, cand: fresh, check: isInput("Checkpoint")},
				{name: "RejectsUnknownCheckpoint", from: kfstype.CheckpointParsed, to: "compiled", check: isInput("Checkpoint")},
				{name: "RejectsEmptyCheckpoint", from: kfstype.CheckpointParsed, to: "", check: isInput("Checkpoint")},
				{name: "BindsCandidateAtProjectionBuilt", from: kfstype.CheckpointNodesGenerated, to: kfstype.CheckpointProjectionBuilt, binds: true, cand: fresh},
				{name: "BindsCandidateBeforeProjectionBuilt", from: kfstype.CheckpointParsed, to: kfstype.CheckpointOutlineBuilt, binds: true, cand: fresh},
				{name: "BindsCandidateAtSameCheckpoint", from: kfstype.CheckpointQueued, to: kfstype.CheckpointQueued, binds: true, cand: fresh},
				{name: "AcceptsSameCandidateAgain", from: kfstype.CheckpointProjectionBuilt, to: kfstype.CheckpointSmokeEvalPassed, cand: bound},
				{name: "AcceptsSameCandidateAtSameCheckpoint", from: kfstype.CheckpointProjectionBuilt, to: kfstype.CheckpointProjectionBuilt, cand: bound},
				{name: "AcceptsProjectionBuiltWithCandidateBoundEarlier", from: kfstype.CheckpointNodesGenerated, bindEarly: true, to: kfstype.CheckpointProjectionBuilt},
				{name: "RejectsDifferentCandidate", from: kfstype.CheckpointProjectionBuilt, to: kfstype.CheckpointSmokeEvalPassed, check: isRejected, cand: fresh},
				{name: "RejectsDifferentCandidateBeforeProjectionBuilt", from: kfstype.CheckpointParsed, bindEarly: true, to: kfstype.CheckpointOutlineBuilt, check: isRejected, cand: fresh},
				{name: "RejectsCandidateOfAnotherTenant", from: kfstype.CheckpointNodesGenerated, to: kfstype.CheckpointProjectionBuilt, check: isRejected,
					cand: func(t *testing.T, b *testBundle, _ *testfactory.Scope, _ candidate) candidate {
						return pub(t, b, b.scope(t), "candidate")
					}},
				{name: "RejectsCandidateOfAnotherSpace", from: kfstype.CheckpointNodesGenerated, to: kfstype.CheckpointProjectionBuilt, check: isRejected,
					cand: func(t *testing.T, b *testBundle, s *testfactory.Scope, _ candidate) candidate {
						other := testfactory.NewScope(b.ctx, t, b.db.Pool, &testfactory.ScopeOpts{TenantID: &s.TenantID})
						return pub(t, b, other, "candidate")
					}},
				{name: "RejectsValidatingPublication", from: kfstype.CheckpointNodesGenerated, to: kfstype.CheckpointProjectionBuilt, check: isRejected,
					cand: func(t *testing.T, b *testBundle, s *testfactory.Scope, _ candidate) candidate {
						return pub(t, b, s, "validating")
					}},
				{name: "RejectsPublishedPublication", from: kfstype.CheckpointNodesGenerated, to: kfstype.CheckpointProjectionBuilt, check: isRejected,
					cand: func(t *testing.T, b *testBundle, s *testfactory.Scope, _ candidate) candidate {
						return pub(t, b, s, "published")
					}},
				{name: "RejectsFingerprintOfAnotherPublication", from: kfstype.CheckpointNodesGenerated, to: kfstype.CheckpointProjectionBuilt, check: isRejected,
					cand: func(t *testing.T, b *testBundle, s *testfactory.Scope, _ candidate) candidate {
						c, other := pub(t, b, s, "candidate"), pub(t, b, s, "candidate")
						return candidate{c.id, other.fp}
					}},
				{name: "RejectsUnknownPublication", from: kfstype.CheckpointNodesGenerated, to: kfstype.CheckpointProjectionBuilt, check: isRejected,
					cand: func(t *testing.T, b *testBundle, s *testfactory.Scope, _ candidate) candidate {
						return candidate{new(uuid.New()), new(testfactory.Fingerprint("nowhere"))}
					}},
				{name: "RejectsProjectionBuiltWithoutCandidate", from: kfstype.CheckpointNodesGenerated, to: kfstype.CheckpointProjectionBuilt, check: isRejected},
				{name: "RejectsUppercaseFingerprint", from: kfstype.CheckpointNodesGenerated, to: kfstype.CheckpointProjectionBuilt, check: isInput("CandidateFingerprint"),
					cand: func(t *testing.T, b *testBundle, s *testfactory.Scope, _ candidate) candidate {
						return candidate{pub(t, b, s, "candidate").id, &upperFP}
					}},
				{name: "RejectsShortFingerprint", from: kfstype.CheckpointNodesGenerated, to: kfstype.CheckpointProjectionBuilt, check: isInput("CandidateFingerprint"),
					cand: func(t *testing.T, b *testBundle, s *testfactory.Scope, _ candidate) candidate {
						c := pub(t, b, s, "candidate")
						return candidate{c.id, new((*c.fp)[:85])}
					}},
				{name: "RejectsLongFingerprint", from: kfstype.CheckpointNodesGenerated, to: kfstype.CheckpointProjectionBuilt, check: isInput("CandidateFingerprint"),
					cand: func(t *testing.T, b *testBundle, s *testfactory.Scope, _ candidate) candidate {
						c := pub(t, b, s, "candidate")
						return candidate{c.id, new(*c.fp + "0")}
					}},
				{name: "RejectsWrongPrefix", from: kfstype.CheckpointNodesGenerated, to: kfstype.CheckpointProjectionBuilt, check: isInput("CandidateFingerprint"),
					cand: func(t *testing.T, b *testBundle, s *testfactory.Scope, _ candidate) candidate {
						c := pub(t, b, s, "candidate")
						return candidate{c.id, new(strings.Replace(*c.fp, "sha256", "sha512", 1))}
					}},
				{name: "RejectsIDWithoutFingerprint", from: kfstype.CheckpointNodesGenerated, to: kfstype.CheckpointProjectionBuilt, check: isInput("CandidatePublicationID"),
					cand: func(t *testing.T, b *testBundle, s *testfactory.Scope, _ candidate) candidate {
						return candidate{pub(t, b, s, "candidate").id, nil}
					}},
				{name: "RejectsFingerprintWithoutID", from: kfstype.CheckpointNodesGenerated, to: kfstype.CheckpointProjectionBuilt, check: isInput("CandidatePublicationID"),
					cand: func(t *testing.T, b *testBundle, s *testfactory.Scope, _ candidate) candidate {
						return candidate{nil, pub(t, b, s, "candidate").fp}
					}},
				{name: "RejectsNilUUID", from: kfstype.CheckpointNodesGenerated, to: kfstype.CheckpointProjectionBuilt, check: isInput("CandidatePublicationID"),
					cand: func(t *testing.T, b *testBundle, s *testfactory.Scope, _ candidate) candidate {
						return candidate{new(uuid.Nil), pub(t, b, s, "candidate").fp}
					}},
			} {
				t.Run(tc.name, func(t *testing.T) {
					check, binds := tc.check, tc.binds
					if impl.name == "AdvanceTo" && tc.advanceTo != nil {
						check, binds = tc.advanceTo.check, tc.advanceTo.binds
					}
					b := setup(t)
					s := b.scope(t)
					_, lease, _ := b.drv.Running(b.ctx, t, s, nil)
					if tc.from != kfstype.CheckpointQueued {
						b.drv.AdvanceTo(b.ctx, t, s, lease, tc.from)
					}
					if tc.bindEarly {
						b.rwBindEarly(t, s, lease)
					}
					b.clock.Advance(time.Second)
					before := b.rows(t, lease.AttemptID)
					require.Equal(t, tc.from, before.Attempt.Checkpoint)
					var c candidate
					if tc.cand != nil {
						c = tc.cand(t, b, s, candidate{before.Attempt.CandidatePublicationID, before.Attempt.CandidateFingerprint})
					}
					got, err := impl.call(b, &repo.AdvanceParams{
						Lease: lease, Checkpoint: tc.to, CandidatePublicationID: c.id, CandidateFingerprint: c.fp,
					})
					if check != nil {
						check(t, err)
						require.Nil(t, got)
						b.requireUnchanged(t, before)
						return
					}
					require.NoError(t, err)
					now := b.clock.Now()
					want := *before
					want.Attempt.Checkpoint = tc.to
					if binds {
						require.Nil(t, before.Attempt.CandidatePublicationID)
						want.Attempt.CandidatePublicationID, want.Attempt.CandidateFingerprint = c.id, c.fp
					}
					want.Attempt.RowVersion++
					want.Attempt.UpdatedAt = now
					require.Equal(t, &want, b.rows(t, lease.AttemptID), "only the checkpoint (and candidate) change; the outbox row is untouched")
					require.Equal(t, want.Attempt, *got)
				})
			}
		})
	}
}

// TestAdvanceToWalksAllTheWay moves an attempt from queued to
// smoke_eval_passed in one AdvanceTo, binding the candidate, then
// completes it: the same rows as the one-step walk.
func TestAdvanceToWalksAllTheWay(t *testing.T) {
	b := setup(t)
	s := b.scope(t)
	_, lease, _ := b.drv.Running(b.ctx, t, s, nil)
	c := b.rwPub(t, s, "candidate")
	b.clock.Advance(time.Second)
	before := b.rows(t, lease.AttemptID)
	got, err := b.repo.AdvanceTo(b.ctx, b.db.Pool, &repo.AdvanceToParams{
		Lease: lease, Checkpoint: kfstype.CheckpointSmokeEvalPassed, CandidatePublicationID: c.id, CandidateFingerprint: c.fp,
	})
	require.NoError(t, err)
	want := *before
	want.Attempt.Checkpoint = kfstype.CheckpointSmokeEvalPassed
	want.Attempt.CandidatePublicationID, want.Attempt.CandidateFingerprint = c.id, c.fp
	want.Attempt.RowVersion++
	want.Attempt.UpdatedAt = b.clock.Now()
	require.Equal(t, &want, b.rows(t, lease.AttemptID))
	require.Equal(t, want.Attempt, *got)

	b.clock.Advance(time.Second)
	done, err := b.repo.Complete(b.ctx, b.db.Pool, &repo.CompleteParams{Lease: lease})
	require.NoError(t, err)
	wantDone := testfactory.ExpectEnded(&want, kfstype.RunStateSucceeded, kfstype.OutboxStatusCompleted, b.clock.Now())
	wantDone.Attempt.Checkpoint = kfstype.CheckpointPublished
	require.Equal(t, wantDone, b.rows(t, lease.AttemptID))
	require.Equal(t, wantDone.Attempt, *done)
}
