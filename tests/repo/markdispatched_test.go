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

func TestMarkDispatched(t *testing.T) {
	t.Parallel()

	t.Run("MarksEveryRowOfABatch", func(t *testing.T) {
		b := setup(t)
		// A retry_wait attempt, due in 10 s.
		_, lease, _ := b.drv.Running(b.ctx, t, b.scope(t), nil)
		retrying := lease.AttemptID
		_, err := b.repo.ScheduleRetry(b.ctx, b.db.Pool, &repo.ScheduleRetryParams{Lease: lease, RetryDelay: 10 * time.Second, ErrorCode: "E", ErrorMessage: "e"})
		require.NoError(t, err)
		b.rows(t, retrying)
		// A queued attempt whose visibility deadline passes: republished.
		requeued := b.drv.Start(b.ctx, t, b.scope(t), nil)
		b.drv.Dispatch(b.ctx, t, requeued.ID, &testfactory.DispatchOpts{QueueJobID: new("job-old"), ExternalJobID: new("ext-old")})
		b.clock.Advance(repo.VisibilityTimeoutDefault)
		// A fresh one.
		fresh := b.drv.Start(b.ctx, t, b.scope(t), nil)

		claimed := b.drv.ClaimAll(b.ctx, t, &testfactory.ClaimOpts{RelayID: new("relay-a")})
		require.Len(t, claimed, 3)
		b.clock.Advance(2 * time.Second)
		befores := map[uuid.UUID]*testfactory.Rows{}
		for id := range claimed {
			befores[id] = b.rows(t, id)
		}
		jobs := map[uuid.UUID]struct {
			job string
			ext *string
		}{
			fresh.ID:    {"job-fresh", nil},
			retrying:    {"job-retry", new("ext-retry")},
			requeued.ID: {"job-requeued", nil},
		}
		var ds []repo.Dispatch
		for _, id := range []uuid.UUID{fresh.ID, retrying, requeued.ID} {
			ds = append(ds, repo.Dispatch{OutboxID: claimed[id].ID, LockToken: *claimed[id].LockToken, QueueJobID: jobs[id].job, ExternalJobID: jobs[id].ext})
		}
		res, err := b.repo.MarkDispatched(b.ctx, b.db.Pool, &repo.MarkDispatchedParams{Dispatches: ds, VisibilityTimeout: 90 * time.Second})
		require.NoError(t, err)
		require.Empty(t, res.Refused)
		require.Len(t, res.Marked, 3)
		marked := map[uuid.UUID]*kfstype.OutboxMessage{}
		for _, m := range res.Marked {
			marked[m.AttemptID] = m
		}
		for id, j := range jobs {
			want := testfactory.ExpectMarked(befores[id], j.job, j.ext, b.clock.Now(), 90*time.Second)
			require.Equal(t, kfstype.RunStateQueued, want.Attempt.RunState)
			after := b.rows(t, id)
			require.Equal(t, want, after, "attempt %s", id)
			require.Equal(t, after.Outbox, *marked[id])
		}
		require.Nil(t, b.rows(t, retrying).Attempt.RetryAt)
		require.Nil(t, b.rows(t, requeued.ID).Attempt.ExternalJobID, "a nil external id replaces the old one")
	})

	t.Run("KeepsRunningAttemptWithExpiredLeaseRunning", func(t *testing.T) {
		b := setup(t)
		_, lease, _ := b.drv.Running(b.ctx, t, b.scope(t), nil)
		b.clock.Advance(repo.LeaseDurationDefault + time.Second)
		m := b.drv.ClaimAll(b.ctx, t, &testfactory.ClaimOpts{RelayID: new("relay-a")})[lease.AttemptID]
		require.NotNil(t, m)
		before := b.rows(t, lease.AttemptID)
		res, err := b.repo.MarkDispatched(b.ctx, b.db.Pool, &repo.MarkDispatchedParams{Dispatches: []repo.Dispatch{{
			OutboxID: m.ID, LockToken: *m.LockToken, QueueJobID: "job-2", ExternalJobID: new("ext-2"),
		}}})
		require.NoError(t, err)
		require.Empty(t, res.Refused)
		want := testfactory.ExpectMarked(before, "job-2", new("ext-2"), b.clock.Now(), repo.VisibilityTimeoutDefault)
		require.Equal(t, kfstype.RunStateRunning, want.Attempt.RunState)
		require.Equal(t, lease.Token, *want.Attempt.LeaseToken, "the expired lease stays until a worker takes over")
		require.Equal(t, want, b.rows(t, lease.AttemptID))
	})

	t.Run("RefusesStaleRowsAndMarksTheRest", func(t *testing.T) {
		b := setup(t)
		// takenOver: running, its lease expires, the relay claims the row,
		// then a worker takes the attempt over with the old delivery.
		_, oldLease, oldDel := b.drv.Running(b.ctx, t, b.scope(t), nil)
		takenOver := oldLease.AttemptID
		b.clock.Advance(repo.LeaseDurationDefault)
		ok := b.drv.Start(b.ctx, t, b.scope(t), nil)
		wrongToken := b.drv.Start(b.ctx, t, b.scope(t), nil)
		reclaimed := b.drv.Start(b.ctx, t, b.scope(t), nil)
		sCanceled := b.scope(t)
		canceled := b.drv.Start(b.ctx, t, sCanceled, nil)
		marked := b.drv.Start(b.ctx, t, b.scope(t), nil)

		first := b.drv.ClaimAll(b.ctx, t, &testfactory.ClaimOpts{RelayID: new("relay-1")})
		require.Len(t, first, 6)
		b.clock.Advance(repo.LockDurationDefault)
		second := b.drv.ClaimAll(b.ctx, t, &testfactory.ClaimOpts{RelayID: new("relay-2")})
		require.Len(t, second, 6, "every lock expired: all recovered")

		_, err := b.repo.Cancel(b.ctx, b.db.Pool, &repo.CancelParams{AttemptRef: sCanceled.Ref(canceled.ID)})
		require.NoError(t, err)
		b.rows(t, canceled.ID)
		b.drv.Acquire(b.ctx, t, oldDel, &testfactory.AcquireOpts{WorkerID: new("worker-b")})
		res, err := b.repo.MarkDispatched(b.ctx, b.db.Pool, &repo.MarkDispatchedParams{Dispatches: []repo.Dispatch{{
			OutboxID: second[marked.ID].ID, LockToken: *second[marked.ID].LockToken, QueueJobID: "job-marked",
		}}})
		require.NoError(t, err)
		require.Len(t, res.Marked, 1)
		b.rows(t, marked.ID)

		b.clock.Advance(time.Second)
		refusedIDs := []uuid.UUID{wrongToken.ID, reclaimed.ID, canceled.ID, takenOver, marked.ID}
		befores := map[uuid.UUID]*testfactory.Rows{ok.ID: b.rows(t, ok.ID)}
		for _, id := range refusedIDs {
			befores[id] = b.rows(t, id)
		}
		d := func(id uuid.UUID, token uuid.UUID) repo.Dispatch {
			return repo.Dispatch{OutboxID: second[id].ID, LockToken: token, QueueJobID: "job-new-" + id.String()}
		}
		res, err = b.repo.MarkDispatched(b.ctx, b.db.Pool, &repo.MarkDispatchedParams{Dispatches: []repo.Dispatch{
			d(wrongToken.ID, uuid.New()),
			d(ok.ID, *second[ok.ID].LockToken),
			d(reclaimed.ID, *first[reclaimed.ID].LockToken), // the token of the expired claim
			d(canceled.ID, *second[canceled.ID].LockToken),
			d(takenOver, *second[takenOver].LockToken),
			d(marked.ID, *second[marked.ID].LockToken), // marked already
		}})
		require.NoError(t, err)
		require.Equal(t, []uuid.UUID{second[wrongToken.ID].ID, second[reclaimed.ID].ID, second[canceled.ID].ID, second[takenOver].ID, second[marked.ID].ID}, res.Refused)
		require.Len(t, res.Marked, 1)
		want := testfactory.ExpectMarked(befores[ok.ID], "job-new-"+ok.ID.String(), nil, b.clock.Now(), repo.VisibilityTimeoutDefault)
		require.Equal(t, want, b.rows(t, ok.ID))
		require.Equal(t, want.Outbox, *res.Marked[0])
		for _, id := range refusedIDs {
			b.requireUnchanged(t, befores[id])
		}
	})

	t.Run("RejectsInvalidInput", func(t *testing.T) {
		b := setup(t)
		a := b.drv.Start(b.ctx, t, b.scope(t), nil)
		m := b.drv.ClaimAll(b.ctx, t, &testfactory.ClaimOpts{RelayID: new("relay-a")})[a.ID]
		before := b.rows(t, a.ID)
		good := repo.Dispatch{OutboxID: m.ID, LockToken: *m.LockToken, QueueJobID: "job-1"}
		with := func(f func(*repo.Dispatch)) []repo.Dispatch {
			d := good
			f(&d)
			return []repo.Dispatch{d}
		}
		many := make([]repo.Dispatch, 101)
		for i := range many {
			many[i] = repo.Dispatch{OutboxID: uuid.New(), LockToken: uuid.New(), QueueJobID: "job"}
		}
		many[0] = good
		for _, tc := range []struct {
			name  string
			field string
			p     repo.MarkDispatchedParams
		}{
			{"EmptyBatch", "Dispatches", repo.MarkDispatchedParams{}},
			{"OversizedBatch", "Dispatches", repo.MarkDispatchedParams{Dispatches: many}},
			{"DuplicateOutboxID", "Dispatches[1].OutboxID", repo.MarkDispatchedParams{Dispatches: []repo.Dispatch{good, good}}},
			{"EmptyQueueJobID", "Dispatches[0].QueueJobID", repo.MarkDispatchedParams{Dispatches: with(func(d *repo.Dispatch) { d.QueueJobID = "" })}},
			{"LongQueueJobID", "Dispatches[0].QueueJobID", repo.MarkDispatchedParams{Dispatches: with(func(d *repo.Dispatch) { d.QueueJobID = strings.Repeat("j", 256) })}},
			{"EmptyExternalJobID", "Dispatches[0].ExternalJobID", repo.MarkDispatchedParams{Dispatches: with(func(d *repo.Dispatch) { d.ExternalJobID = new("") })}},
			{"LongExternalJobID", "Dispatches[0].ExternalJobID", repo.MarkDispatchedParams{Dispatches: with(func(d *repo.Dispatch) { d.ExternalJobID = new(strings.Repeat("e", 256)) })}},
			{"ZeroLockToken", "Dispatches[0].LockToken", repo.MarkDispatchedParams{Dispatches: with(func(d *repo.Dispatch) { d.LockToken = uuid.Nil })}},
			{"ZeroOutboxID", "Dispatches[0].OutboxID", repo.MarkDispatchedParams{Dispatches: with(func(d *repo.Dispatch) { d.OutboxID = uuid.Nil })}},
			{"NegativeVisibility", "VisibilityTimeout", repo.MarkDispatchedParams{Dispatches: []repo.Dispatch{good}, VisibilityTimeout: -time.Second}},
		} {
			t.Run(tc.name, func(t *testing.T) {
				res, err := b.repo.MarkDispatched(b.ctx, b.db.Pool, &tc.p)
				requireInputError(t, err, tc.field)
				require.Nil(t, res)
				b.requireUnchanged(t, before)
			})
		}
		// 255 characters are fine.
		res, err := b.repo.MarkDispatched(b.ctx, b.db.Pool, &repo.MarkDispatchedParams{Dispatches: with(func(d *repo.Dispatch) {
			d.QueueJobID, d.ExternalJobID = strings.Repeat("j", 255), new(strings.Repeat("e", 255))
		})})
		require.NoError(t, err)
		require.Len(t, res.Marked, 1)
		require.Equal(t, testfactory.ExpectMarked(before, strings.Repeat("j", 255), new(strings.Repeat("e", 255)), b.clock.Now(), repo.VisibilityTimeoutDefault), b.rows(t, a.ID))
	})
}
