package worker

import (
	"context"
	"sync/atomic"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/knowledgefs/kfsdb/internal/runcfg"
	"github.com/knowledgefs/kfsdb/kfstype"
	"github.com/knowledgefs/kfsdb/repo"
)

// Job is a handler's handle on its leased attempt. Its methods write
// through the current lease (renewed by the heartbeat); each returns
// repo.ErrLeaseLost once the lease is gone.
type Job struct {
	// Attempt is the attempt as leased, updated by Advance and
	// BindCandidate. Only the handler's goroutine may use it.
	Attempt *kfstype.Attempt

	repo  *repo.Repo
	pool  *pgxpool.Pool
	lease atomic.Pointer[repo.Lease]
	// through is set by CompleteThrough: the completing write walks the
	// remaining checkpoints.
	through *repo.CompleteThroughParams
}

// errNilJob is what a nil Job's writes return.
var errNilJob = runcfg.Invalid("worker", "Job", "must not be nil (the worker makes it)")

// Lease returns the current lease (nil for a nil Job).
func (j *Job) Lease() *repo.Lease {
	if j == nil {
		return nil
	}
	return j.lease.Load()
}

// Advance moves the checkpoint one step (or keeps it).
func (j *Job) Advance(ctx context.Context, cp kfstype.Checkpoint) error {
	if j == nil {
		return errNilJob
	}
	a, err := j.repo.Advance(ctx, j.pool, &repo.AdvanceParams{Lease: j.Lease(), Checkpoint: cp})
	if err != nil {
		return err
	}
	j.Attempt = a
	return nil
}

// AdvanceTo moves the checkpoint forward any number of steps in one write
// (repo.AdvanceTo); projection_built and later need a bound candidate.
func (j *Job) AdvanceTo(ctx context.Context, cp kfstype.Checkpoint) error {
	if j == nil {
		return errNilJob
	}
	a, err := j.repo.AdvanceTo(ctx, j.pool, &repo.AdvanceToParams{Lease: j.Lease(), Checkpoint: cp})
	if err != nil {
		return err
	}
	j.Attempt = a
	return nil
}

// CompleteThrough asks the worker to complete the attempt from whatever
// checkpoint it has reached once the handler returns nil, binding the
// candidate publication if none is bound (repo.CompleteThrough): a handler
// with nothing to persist between checkpoints costs one commit after its
// lease instead of one per step. It writes nothing itself; if the
// candidate is refused the attempt fails like a handler that stopped short.
func (j *Job) CompleteThrough(publicationID uuid.UUID, fingerprint string) {
	if j == nil {
		return
	}
	j.through = &repo.CompleteThroughParams{CandidatePublicationID: &publicationID, CandidateFingerprint: &fingerprint}
}

// BindCandidate advances to cp (normally projection_built) and binds the
// candidate publication in the same write.
func (j *Job) BindCandidate(ctx context.Context, cp kfstype.Checkpoint, publicationID uuid.UUID, fingerprint string) error {
	if j == nil {
		return errNilJob
	}
	a, err := j.repo.Advance(ctx, j.pool, &repo.AdvanceParams{
		Lease: j.Lease(), Checkpoint: cp, CandidatePublicationID: &publicationID, CandidateFingerprint: &fingerprint,
	})
	if err != nil {
		return err
	}
	j.Attempt = a
	return nil
}
