package repo

import (
	"context"
	"fmt"

	"github.com/google/uuid"

	"github.com/knowledgefs/kfsdb/db/gen"
	"github.com/knowledgefs/kfsdb/kfstype"
)

// AdvanceParams moves a running attempt's checkpoint.
type AdvanceParams struct {
	Lease *Lease
	// Checkpoint is the current checkpoint or the next one; published is
	// reached only through Complete.
	Checkpoint kfstype.Checkpoint
	// CandidatePublicationID and CandidateFingerprint bind the candidate
	// publication (both or neither; bound once). Required by the time the
	// attempt reaches projection_built. Defaults to nil: nothing bound.
	CandidatePublicationID *uuid.UUID
	CandidateFingerprint   *string
}

// Advance keeps the checkpoint or moves it one step, binding the candidate
// publication when given.
//
// Errors: *InputError, ErrNotFound, ErrLeaseLost, *TransitionError (a
// checkpoint that skips or goes back), ErrCandidateRejected.
func (r *Repo) Advance(ctx context.Context, db DBTX, p *AdvanceParams) (*kfstype.Attempt, error) {
	return r.advance(ctx, db, p, 1)
}

// AdvanceTo moves the checkpoint forward any number of steps (or keeps it)
// in one statement, binding the candidate publication when given. It is
// the same as the one-step Advance calls it replaces, run in one
// transaction: for a handler that has nothing to persist between
// checkpoints, it saves a commit per step skipped.
//
// Errors: as Advance; *TransitionError when the checkpoint would go back.
func (r *Repo) AdvanceTo(ctx context.Context, db DBTX, p *AdvanceParams) (*kfstype.Attempt, error) {
	return r.advance(ctx, db, p, kfstype.CheckpointSmokeEvalPassed.Rank())
}

// advance is Advance and AdvanceTo: the checkpoint stays or moves forward
// at most maxSteps steps.
func (r *Repo) advance(ctx context.Context, db DBTX, p *AdvanceParams, maxSteps int) (*kfstype.Attempt, error) {
	v := r.call(ctx, db)
	p.validate(v)
	if err := v.result(); err != nil {
		return nil, err
	}
	row, err := r.q.Advance(ctx, db, &gen.AdvanceParams{AsyncCommit: r.asyncProgress,
		Checkpoint: string(p.Checkpoint), MaxSteps: int32(maxSteps), CandidatePublicationID: p.CandidatePublicationID,
		CandidateFingerprint: p.CandidateFingerprint, Now: r.now(), AttemptID: p.Lease.AttemptID,
		LeaseToken: p.Lease.Token, WorkerID: p.Lease.WorkerID,
	})
	if err == nil {
		return attemptFromRow(row), nil
	}
	a, err := r.explainLease(ctx, db, "advance", p.Lease, err)
	if a == nil {
		return nil, err
	}
	switch cur, want := a.Checkpoint.Rank(), p.Checkpoint.Rank(); {
	case want < cur:
		return nil, checkpointRefusal("advance", a, p.Checkpoint, "goes back")
	case want > cur+maxSteps:
		return nil, checkpointRefusal("advance", a, p.Checkpoint, "skips a checkpoint")
	}
	return nil, candidateRefusal("advance", a, p.Checkpoint, p.CandidatePublicationID, p.CandidateFingerprint)
}

func (p *AdvanceParams) validate(v *validator) {
	if !set(v, "AdvanceParams", p) {
		return
	}
	p.Lease.validate(v)
	switch {
	case p.Checkpoint == kfstype.CheckpointPublished:
		v.fail("Checkpoint", "published is reached through Complete")
	case p.Checkpoint.Rank() < 0:
		v.fail("Checkpoint", fmt.Sprintf("unknown checkpoint %q", p.Checkpoint))
	}
	validateCandidate(v, p.CandidatePublicationID, p.CandidateFingerprint)
}

func validateCandidate(v *validator, id *uuid.UUID, fingerprint *string) {
	if (id == nil) != (fingerprint == nil) {
		v.fail("CandidatePublicationID", "and CandidateFingerprint go together")
	}
	if id != nil {
		v.uuid("CandidatePublicationID", *id)
	}
	if fingerprint != nil {
		v.fingerprint("CandidateFingerprint", *fingerprint)
	}
}

func checkpointRefusal(verb string, a *kfstype.Attempt, to kfstype.Checkpoint, why string) error {
	return &TransitionError{AttemptID: a.ID, Transition: verb, From: a.RunState, To: a.RunState, Checkpoint: a.Checkpoint,
		Reason: fmt.Sprintf("checkpoint %s -> %s %s", a.Checkpoint, to, why), Attempt: a}
}

// candidateRefusal says why a write whose lease and checkpoint rules hold
// was refused: the candidate publication. a is the row read after the
// refusal; to is the checkpoint the write would have reached.
func candidateRefusal(verb string, a *kfstype.Attempt, to kfstype.Checkpoint, id *uuid.UUID, fingerprint *string) error {
	switch {
	case id == nil && a.CandidatePublicationID == nil && to.NeedsCandidate():
		return fmt.Errorf("%s attempt %s to %s: %w: no candidate publication bound", verb, a.ID, to, ErrCandidateRejected)
	case id == nil:
		return raced(verb, a)
	case a.CandidatePublicationID != nil && (*a.CandidatePublicationID != *id || *a.CandidateFingerprint != *fingerprint):
		return fmt.Errorf("%s attempt %s: %w: candidate %s already bound, not %s", verb, a.ID, ErrCandidateRejected, *a.CandidatePublicationID, *id)
	case a.CandidatePublicationID != nil:
		return raced(verb, a)
	default:
		return fmt.Errorf("%s attempt %s: %w: %s is not a candidate publication with that fingerprint in the attempt's tenant and space", verb, a.ID, ErrCandidateRejected, *id)
	}
}
