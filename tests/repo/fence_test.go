package repo_test

import (
	"cmp"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"

	"github.com/knowledgefs/kfsdb/kfstype"
	"github.com/knowledgefs/kfsdb/repo"
	"github.com/knowledgefs/kfsdb/tests/testfactory"
)

// leaseFaults each lose a running attempt's lease (at smoke_eval_passed,
// so Complete would otherwise succeed) and return the lease to present.
var leaseFaults = []struct {
	name  string
	apply func(t *testing.T, b *testBundle, s *testfactory.Scope, lease *repo.Lease, del *repo.Delivery) *repo.Lease
}{
	{"OtherOwner", func(t *testing.T, b *testBundle, _ *testfactory.Scope, lease *repo.Lease, _ *repo.Delivery) *repo.Lease {
		l := *lease
		l.WorkerID = "worker-intruder"
		return &l
	}},
	{"ForgedToken", func(t *testing.T, b *testBundle, _ *testfactory.Scope, lease *repo.Lease, _ *repo.Delivery) *repo.Lease {
		l := *lease
		l.Token = uuid.New()
		return &l
	}},
	{"StaleTokenAfterTakeover", func(t *testing.T, b *testBundle, _ *testfactory.Scope, lease *repo.Lease, del *repo.Delivery) *repo.Lease {
		b.clock.Advance(repo.LeaseDurationDefault)
		b.drv.Acquire(b.ctx, t, del, &testfactory.AcquireOpts{WorkerID: new("worker-b")})
		return lease
	}},
	{"StaleTokenOfSameWorker", func(t *testing.T, b *testBundle, _ *testfactory.Scope, lease *repo.Lease, del *repo.Delivery) *repo.Lease {
		b.clock.Advance(repo.LeaseDurationDefault)
		b.drv.Acquire(b.ctx, t, del, &testfactory.AcquireOpts{WorkerID: new(lease.WorkerID)})
		return lease
	}},
	{"ExpiredLease", func(t *testing.T, b *testBundle, _ *testfactory.Scope, lease *repo.Lease, _ *repo.Delivery) *repo.Lease {
		b.clock.Advance(lease.ExpiresAt.Sub(b.clock.Now())) // lease_expires_at = now
		return lease
	}},
	{"ExpiredLeaseRedelivered", func(t *testing.T, b *testBundle, _ *testfactory.Scope, lease *repo.Lease, _ *repo.Delivery) *repo.Lease {
		b.clock.Advance(repo.LeaseDurationDefault + time.Second)
		b.drv.Dispatch(b.ctx, t, lease.AttemptID, &testfactory.DispatchOpts{QueueJobID: new("job-redelivered")})
		return lease
	}},
	{"OutboxReclaimedByRelay", func(t *testing.T, b *testBundle, _ *testfactory.Scope, lease *repo.Lease, _ *repo.Delivery) *repo.Lease {
		// The relay's clock reached the lease's expiry and it reclaimed the
		// leased row; the worker's clock (b.clock) is still before it.
		b.drv.Reclaim(b.ctx, t, lease)
		return lease
	}},
	{"TerminalAttempt", func(t *testing.T, b *testBundle, s *testfactory.Scope, lease *repo.Lease, _ *repo.Delivery) *repo.Lease {
		_, err := b.repo.Cancel(b.ctx, b.db.Pool, &repo.CancelParams{AttemptRef: s.Ref(lease.AttemptID)})
		require.NoError(t, err)
		return lease
	}},
}

// leaseOps are the lease-fenced transitions, each called with a lease that
// would let it succeed.
var leaseOps = []struct {
	name string
	call func(b *testBundle, lease *repo.Lease) error
}{
	{"Heartbeat", func(b *testBundle, lease *repo.Lease) error {
		_, err := b.repo.Heartbeat(b.ctx, b.db.Pool, &repo.HeartbeatParams{Lease: lease})
		return err
	}},
	{"Advance", func(b *testBundle, lease *repo.Lease) error {
		_, err := b.repo.Advance(b.ctx, b.db.Pool, &repo.AdvanceParams{Lease: lease, Checkpoint: kfstype.CheckpointSmokeEvalPassed})
		return err
	}},
	{"AdvanceTo", func(b *testBundle, lease *repo.Lease) error {
		_, err := b.repo.AdvanceTo(b.ctx, b.db.Pool, &repo.AdvanceToParams{Lease: lease, Checkpoint: kfstype.CheckpointSmokeEvalPassed})
		return err
	}},
	{"Complete", func(b *testBundle, lease *repo.Lease) error {
		_, err := b.repo.Complete(b.ctx, b.db.Pool, &repo.CompleteParams{Lease: lease})
		return err
	}},
	{"CompleteThrough", func(b *testBundle, lease *repo.Lease) error {
		_, err := b.repo.CompleteThrough(b.ctx, b.db.Pool, &repo.CompleteThroughParams{Lease: lease})
		return err
	}},
	{"Fail", func(b *testBundle, lease *repo.Lease) error {
		_, err := b.repo.Fail(b.ctx, b.db.Pool, &repo.FailParams{Lease: lease, ErrorCode: "E", ErrorMessage: "e"})
		return err
	}},
	{"ScheduleRetry", func(b *testBundle, lease *repo.Lease) error {
		_, err := b.repo.ScheduleRetry(b.ctx, b.db.Pool, &repo.ScheduleRetryParams{Lease: lease, RetryDelay: time.Second, ErrorCode: "E", ErrorMessage: "e"})
		return err
	}},
	{"CompleteMany", func(b *testBundle, lease *repo.Lease) error {
		res, err := b.repo.CompleteMany(b.ctx, b.db.Pool, &repo.CompleteManyParams{Entries: []repo.CompleteManyEntry{{Lease: lease}}})
		if err != nil {
			return err
		}
		return res[0].Err
	}},
}

// TestLeaseFence proves that every lease-fenced transition refuses a lease
// that is lost (another owner, a stale or forged token, an expired lease, a
// terminal attempt) with ErrLeaseLost and changes nothing, and that the
// same call succeeds with the lease intact.
func TestLeaseFence(t *testing.T) {
	t.Parallel()
	for _, op := range leaseOps {
		t.Run(op.name+"AcceptsOwnLease", func(t *testing.T) {
			b := setup(t)
			_, lease, _ := b.drv.Running(b.ctx, t, b.scope(t), &testfactory.RunningOpts{Checkpoint: new(kfstype.CheckpointSmokeEvalPassed)})
			b.clock.Advance(repo.LeaseDurationDefault - time.Microsecond)
			require.NoError(t, op.call(b, lease))
			b.rows(t, lease.AttemptID)
		})
		for _, fault := range leaseFaults {
			t.Run(op.name+"Rejects"+fault.name, func(t *testing.T) {
				b := setup(t)
				s := b.scope(t)
				_, lease, del := b.drv.Running(b.ctx, t, s, &testfactory.RunningOpts{Checkpoint: new(kfstype.CheckpointSmokeEvalPassed)})
				presented := fault.apply(t, b, s, lease, del)
				before := b.rows(t, lease.AttemptID)
				err := op.call(b, presented)
				require.ErrorIs(t, err, repo.ErrLeaseLost)
				b.requireUnchanged(t, before)
			})
		}
	}
}

// leaseOpStatements names the query a leaseOps entry runs where that is
// not its name: AdvanceTo is Advance's statement.
var leaseOpStatements = map[string]string{"AdvanceTo": "Advance"}

// TestLeaseFenceLockOrder proves that every lease-fenced transition locks
// the attempt before its outbox row: while it waits for the outbox row
// (held by another transaction), it already holds the attempt.
func TestLeaseFenceLockOrder(t *testing.T) {
	t.Parallel()
	for _, op := range leaseOps {
		t.Run(op.name, func(t *testing.T) {
			b := setup(t)
			s := b.scope(t)
			_, lease, _ := b.drv.Running(b.ctx, t, s, &testfactory.RunningOpts{Checkpoint: new(kfstype.CheckpointSmokeEvalPassed)})
			holder := b.rwLockRow(t, `SELECT 1 FROM document_compilation_outbox WHERE attempt_id = $1 FOR UPDATE`, lease.AttemptID)
			done := b.rwBlocked(t, cmp.Or(leaseOpStatements[op.name], op.name), func() error { return op.call(b, lease) })
			_, err := b.db.Pool.Exec(b.ctx, `SELECT 1 FROM document_compilation_attempts WHERE id = $1 FOR UPDATE NOWAIT`, lease.AttemptID)
			var pgErr *pgconn.PgError
			require.ErrorAs(t, err, &pgErr, "the attempt is locked while %s waits for the outbox row", op.name)
			require.Equal(t, "55P03", pgErr.Code) // lock_not_available
			require.NoError(t, holder.Rollback(b.ctx))
			require.NoError(t, <-done)
			b.rows(t, lease.AttemptID)
		})
	}
}
