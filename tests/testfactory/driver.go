package testfactory

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/knowledgefs/kfsdb/kfstype"
	"github.com/knowledgefs/kfsdb/repo"
)

// Driver walks attempts through the state machine with a Repo: the one way
// tests put an attempt in a state. Safe for concurrent use.
type Driver struct {
	// DB is what every step runs on.
	DB DBTX
	// Invariants, when set, checks the invariants of every attempt a step
	// moved, after the step. Defaults to false (InState checks them
	// anyway).
	Invariants bool
	// RelayID claims outbox rows. Defaults to "relay-test".
	RelayID string
	// Repo runs every step.
	Repo *repo.Repo
	// Worker acquires leases. Defaults to "worker-test".
	Worker string

	jobSeq int
	mu     sync.Mutex
}

// AcquireOpts tunes Driver.Acquire; every field is optional.
type AcquireOpts struct {
	// WorkerID takes the lease. Defaults to the driver's Worker.
	WorkerID *string
}

// ClaimOpts tunes Driver.ClaimAll; every field is optional.
type ClaimOpts struct {
	// Now is the relay's clock: a relay whose time runs ahead of the
	// driver's Repo (a lease's expiry, say). Defaults to the Repo's clock.
	Now *time.Time
	// RelayID claims the rows. Defaults to the driver's RelayID.
	RelayID *string
}

// DispatchOpts tunes Driver.Dispatch; every field is optional.
type DispatchOpts struct {
	// ExternalJobID is the queue's own id of the job. Defaults to none.
	ExternalJobID *string
	// QueueJobID is the job's id. Defaults to NextJobID().
	QueueJobID *string
}

// RunningOpts tunes Driver.Running; every field is optional.
type RunningOpts struct {
	// Checkpoint is where the running attempt is advanced to (see
	// AdvanceTo). Defaults to queued: not advanced.
	Checkpoint *kfstype.Checkpoint
	// Start tunes the attempt's StartParams. Defaults to none.
	Start *StartOpts
}

// StartOpts tunes the StartParams of Driver.Start; every field is
// optional.
type StartOpts struct {
	// AvailableAt delays the first publication. Defaults to now.
	AvailableAt *time.Time
	// Deferred parks the outbox row until ReleaseDeferred. Defaults to
	// false.
	Deferred *bool
	// MaxExecutionAttempts bounds AcquireLease. Defaults to
	// repo.MaxExecutionAttemptsDefault.
	MaxExecutionAttempts *int32
}

// params returns the scope's Start parameters with the options applied.
func (o *StartOpts) params(s *Scope) *repo.StartParams {
	p := s.StartParams()
	if o == nil {
		return p
	}
	p.AvailableAt = o.AvailableAt
	if o.Deferred != nil {
		p.Deferred = *o.Deferred
	}
	if o.MaxExecutionAttempts != nil {
		p.MaxExecutionAttempts = *o.MaxExecutionAttempts
	}
	return p
}

// NextJobID returns a fresh queue job id.
func (d *Driver) NextJobID() string {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.jobSeq++
	return fmt.Sprintf("job-%d-%s", d.jobSeq, uuid.NewString()[:8])
}

// check checks the attempt's invariants when the driver is told to.
func (d *Driver) check(ctx context.Context, t testing.TB, attemptID uuid.UUID) {
	t.Helper()
	if d.Invariants {
		RequireInvariants(ctx, t, d.DB, attemptID)
	}
}

func (d *Driver) relay() string {
	if d.RelayID == "" {
		return "relay-test"
	}
	return d.RelayID
}

func (d *Driver) worker() string {
	if d.Worker == "" {
		return "worker-test"
	}
	return d.Worker
}

// Start starts an attempt for the scope (opts tunes its StartParams) and
// requires it was created.
func (d *Driver) Start(ctx context.Context, t testing.TB, s *Scope, opts *StartOpts) *kfstype.Attempt {
	t.Helper()
	res, err := d.Repo.Start(ctx, d.DB, opts.params(s))
	require.NoError(t, err)
	require.True(t, res.Created)
	d.check(ctx, t, res.Attempt.ID)
	return res.Attempt
}

// ClaimAll claims every due outbox row and returns them by attempt.
func (d *Driver) ClaimAll(ctx context.Context, t testing.TB, opts *ClaimOpts) map[uuid.UUID]*kfstype.OutboxMessage {
	t.Helper()
	if opts == nil {
		opts = &ClaimOpts{}
	}
	r, relayID := d.Repo, d.relay()
	if opts.Now != nil {
		r = repo.New(&repo.Config{Clock: ClockAt(*opts.Now)})
	}
	if opts.RelayID != nil {
		relayID = *opts.RelayID
	}
	msgs, err := r.ClaimOutbox(ctx, d.DB, &repo.ClaimOutboxParams{RelayID: relayID, BatchSize: repo.MaxBatchSize})
	require.NoError(t, err)
	out := make(map[uuid.UUID]*kfstype.OutboxMessage, len(msgs))
	for _, m := range msgs {
		out[m.AttemptID] = m
		d.check(ctx, t, m.AttemptID)
	}
	return out
}

// Claim claims every due outbox row and returns the attempt's, which must
// be among them. Other claimed rows stay dispatching.
func (d *Driver) Claim(ctx context.Context, t testing.TB, attemptID uuid.UUID) *kfstype.OutboxMessage {
	t.Helper()
	m := d.ClaimAll(ctx, t, nil)[attemptID]
	require.NotNil(t, m, "outbox row of attempt %s not claimed", attemptID)
	return m
}

// Reclaim has a relay whose clock is at the lease's expiry claim the
// attempt's leased outbox row (as ClaimOutbox does for a lost worker),
// while the driver's Repo stays where it is, and returns the claimed row.
func (d *Driver) Reclaim(ctx context.Context, t testing.TB, lease *repo.Lease) *kfstype.OutboxMessage {
	t.Helper()
	m := d.ClaimAll(ctx, t, &ClaimOpts{Now: &lease.ExpiresAt, RelayID: new("relay-ahead")})[lease.AttemptID]
	require.NotNil(t, m, "the relay did not reclaim the leased row of attempt %s", lease.AttemptID)
	require.Equal(t, kfstype.OutboxStatusDispatching, m.Status)
	return m
}

// Dispatch claims every due row, marks the attempt's row dispatched and
// returns the delivery a worker would receive. Other claimed rows stay
// dispatching.
func (d *Driver) Dispatch(ctx context.Context, t testing.TB, attemptID uuid.UUID, opts *DispatchOpts) *repo.Delivery {
	t.Helper()
	if opts == nil {
		opts = &DispatchOpts{}
	}
	m := d.Claim(ctx, t, attemptID)
	job := d.NextJobID()
	if opts.QueueJobID != nil {
		job = *opts.QueueJobID
	}
	res, err := d.Repo.MarkDispatched(ctx, d.DB, &repo.MarkDispatchedParams{Dispatches: []repo.Dispatch{{
		OutboxID: m.ID, LockToken: *m.LockToken, QueueJobID: job, ExternalJobID: opts.ExternalJobID,
	}}})
	require.NoError(t, err)
	require.Len(t, res.Marked, 1)
	d.check(ctx, t, attemptID)
	return &repo.Delivery{AttemptID: attemptID, QueueJobID: job, ExternalJobID: opts.ExternalJobID}
}

// Acquire acquires the lease of a delivery.
func (d *Driver) Acquire(ctx context.Context, t testing.TB, del *repo.Delivery, opts *AcquireOpts) (*kfstype.Attempt, *repo.Lease) {
	t.Helper()
	workerID := d.worker()
	if opts != nil && opts.WorkerID != nil {
		workerID = *opts.WorkerID
	}
	a, lease, err := d.Repo.AcquireLease(ctx, d.DB, &repo.AcquireLeaseParams{Delivery: *del, WorkerID: workerID})
	require.NoError(t, err)
	d.check(ctx, t, del.AttemptID)
	return a, lease
}

// Running starts an attempt, dispatches it, acquires its lease and
// advances it to opts.Checkpoint.
func (d *Driver) Running(ctx context.Context, t testing.TB, s *Scope, opts *RunningOpts) (*kfstype.Attempt, *repo.Lease, *repo.Delivery) {
	t.Helper()
	if opts == nil {
		opts = &RunningOpts{}
	}
	a := d.Start(ctx, t, s, opts.Start)
	del := d.Dispatch(ctx, t, a.ID, nil)
	a, lease := d.Acquire(ctx, t, del, nil)
	if opts.Checkpoint != nil && *opts.Checkpoint != kfstype.CheckpointQueued {
		a = d.AdvanceTo(ctx, t, s, lease, *opts.Checkpoint)
	}
	return a, lease, del
}

// AdvanceTo advances a running attempt checkpoint by checkpoint to target,
// binding a fresh candidate publication at projection_built.
func (d *Driver) AdvanceTo(ctx context.Context, t testing.TB, s *Scope, lease *repo.Lease, target kfstype.Checkpoint) *kfstype.Attempt {
	t.Helper()
	var a *kfstype.Attempt
	cps := kfstype.Checkpoints()
	for i := 1; i <= target.Rank(); i++ {
		p := &repo.AdvanceParams{Lease: lease, Checkpoint: cps[i]}
		if cps[i] == kfstype.CheckpointProjectionBuilt {
			id, fp := s.Publication(ctx, t, d.DB, "candidate")
			p.CandidatePublicationID, p.CandidateFingerprint = &id, &fp
		}
		var err error
		a, err = d.Repo.Advance(ctx, d.DB, p)
		require.NoError(t, err)
		d.check(ctx, t, lease.AttemptID)
	}
	return a
}

// InState starts an attempt for the scope and walks it to state (through
// Running for retry_wait, succeeded and failed; straight from
// dispatch_pending for canceled and superseded), checking the invariants
// after every step.
func (d *Driver) InState(ctx context.Context, t testing.TB, s *Scope, state kfstype.RunState) *kfstype.Attempt {
	t.Helper()
	inv := func(a *kfstype.Attempt) *kfstype.Attempt {
		t.Helper()
		RequireInvariants(ctx, t, d.DB, a.ID)
		return a
	}
	running := func() (*kfstype.Attempt, *repo.Lease) {
		t.Helper()
		a, lease, _ := d.Running(ctx, t, s, nil)
		return inv(a), lease
	}
	switch state {
	case kfstype.RunStateDispatchPending:
		return inv(d.Start(ctx, t, s, nil))
	case kfstype.RunStateQueued:
		a := inv(d.Start(ctx, t, s, nil))
		d.Dispatch(ctx, t, a.ID, nil)
		a, err := d.Repo.GetAttempt(ctx, d.DB, &repo.GetAttemptParams{TenantID: s.TenantID, AttemptID: a.ID})
		require.NoError(t, err)
		return inv(a)
	case kfstype.RunStateRunning:
		a, _ := running()
		return a
	case kfstype.RunStateRetryWait:
		_, lease := running()
		a, err := d.Repo.ScheduleRetry(ctx, d.DB, &repo.ScheduleRetryParams{
			Lease: lease, RetryDelay: 30 * time.Second,
			ErrorCode: kfstype.ErrorCodeCompilationRetryable, ErrorMessage: "transient",
		})
		require.NoError(t, err)
		return inv(a)
	case kfstype.RunStateSucceeded:
		_, lease := running()
		inv(d.AdvanceTo(ctx, t, s, lease, kfstype.CheckpointSmokeEvalPassed))
		a, err := d.Repo.Complete(ctx, d.DB, &repo.CompleteParams{Lease: lease})
		require.NoError(t, err)
		return inv(a)
	case kfstype.RunStateFailed:
		_, lease := running()
		a, err := d.Repo.Fail(ctx, d.DB, &repo.FailParams{
			Lease: lease, ErrorCode: kfstype.ErrorCodeCompilationFailed, ErrorMessage: "broken",
		})
		require.NoError(t, err)
		return inv(a)
	case kfstype.RunStateCanceled:
		a := inv(d.Start(ctx, t, s, nil))
		a, err := d.Repo.Cancel(ctx, d.DB, &repo.CancelParams{AttemptRef: s.Ref(a.ID)})
		require.NoError(t, err)
		return inv(a)
	case kfstype.RunStateSuperseded:
		a := inv(d.Start(ctx, t, s, nil))
		a, err := d.Repo.Supersede(ctx, d.DB, &repo.SupersedeParams{AttemptRef: s.Ref(a.ID)})
		require.NoError(t, err)
		return inv(a)
	}
	require.FailNow(t, "unknown run state", "%s", state)
	return nil
}
