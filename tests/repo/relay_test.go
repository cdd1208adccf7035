package repo_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/knowledgefs/kfsdb/kfstype"
	"github.com/knowledgefs/kfsdb/repo"
	"github.com/knowledgefs/kfsdb/tests/testfactory"
)

// Helpers shared by relay_test.go and worker_test.go carry an rw prefix.

// rwRows reads an attempt's rows and checks every invariant.
func (b *testBundle) rwRows(t *testing.T, attemptID uuid.UUID) *testfactory.Rows {
	t.Helper()
	return testfactory.RequireInvariants(b.ctx, t, b.db.Pool, attemptID)
}

// rwStart starts an attempt in a fresh scope; opts tunes its Start.
func (b *testBundle) rwStart(t *testing.T, opts func(*repo.StartParams)) (*testfactory.Scope, *kfstype.Attempt) {
	t.Helper()
	s := b.scope(t)
	p := s.StartParams()
	if opts != nil {
		opts(p)
	}
	res, err := b.repo.Start(b.ctx, b.db.Pool, p)
	require.NoError(t, err)
	require.True(t, res.Created)
	b.rwRows(t, res.Attempt.ID)
	return s, res.Attempt
}

// rwClaim claims every due row for relayID and returns them by attempt.
func (b *testBundle) rwClaim(t *testing.T, relayID string) map[uuid.UUID]*kfstype.OutboxMessage {
	t.Helper()
	msgs, err := b.repo.ClaimOutbox(b.ctx, b.db.Pool, &repo.ClaimParams{RelayID: relayID, BatchSize: repo.MaxBatchSize})
	require.NoError(t, err)
	out := make(map[uuid.UUID]*kfstype.OutboxMessage, len(msgs))
	for _, m := range msgs {
		out[m.AttemptID] = m
		b.rwRows(t, m.AttemptID)
	}
	return out
}

// rwDispatch claims every due row, marks the attempt's row dispatched with
// the given job ids and returns the delivery a worker receives. Other
// claimed rows stay dispatching.
func (b *testBundle) rwDispatch(t *testing.T, attemptID uuid.UUID, job string, ext *string) *repo.Delivery {
	t.Helper()
	m := b.rwClaim(t, "relay-setup")[attemptID]
	require.NotNil(t, m, "outbox row of attempt %s not due", attemptID)
	res, err := b.repo.MarkDispatched(b.ctx, b.db.Pool, &repo.MarkDispatchedParams{Dispatches: []repo.Dispatch{{
		OutboxID: m.ID, LockToken: *m.LockToken, QueueJobID: job, ExternalJobID: ext,
	}}})
	require.NoError(t, err)
	require.Len(t, res.Marked, 1)
	b.rwRows(t, attemptID)
	return &repo.Delivery{AttemptID: attemptID, QueueJobID: job, ExternalJobID: ext}
}

// rwAcquire acquires the lease of a delivery and checks the invariants.
func (b *testBundle) rwAcquire(t *testing.T, del *repo.Delivery, workerID string) *repo.Lease {
	t.Helper()
	_, lease, err := b.repo.AcquireLease(b.ctx, b.db.Pool, &repo.AcquireLeaseParams{Delivery: *del, WorkerID: workerID})
	require.NoError(t, err)
	b.rwRows(t, del.AttemptID)
	return lease
}

// rwRunning starts an attempt (opts tunes Start) and takes its lease as
// worker-test.
func (b *testBundle) rwRunning(t *testing.T, opts func(*repo.StartParams)) (*testfactory.Scope, *repo.Lease, *repo.Delivery) {
	t.Helper()
	s, a := b.rwStart(t, opts)
	del := b.rwDispatch(t, a.ID, "job-"+uuid.NewString(), nil)
	return s, b.rwAcquire(t, del, "worker-test"), del
}

// wantClaimed is before with the outbox row claimed by relayID at now.
func wantClaimed(before *testfactory.Rows, m *kfstype.OutboxMessage, relayID string, now time.Time, lock time.Duration) *testfactory.Rows {
	want := *before
	want.Outbox.Status = kfstype.OutboxStatusDispatching
	want.Outbox.DispatchAttempts++
	want.Outbox.LockedBy = new(relayID)
	want.Outbox.LockToken = m.LockToken
	want.Outbox.LockedUntil = new(now.Add(lock))
	want.Outbox.UpdatedAt = now
	return &want
}

func TestClaimOutbox(t *testing.T) {
	t.Parallel()

	// Each case puts one attempt's outbox row in a state and says whether
	// ClaimOutbox finds it due. Boundaries are exact: due means
	// available_at <= now (locked_until <= now for a claimed row).
	cases := []struct {
		name  string
		build func(t *testing.T, b *testBundle) uuid.UUID
		due   bool
	}{
		{"ClaimsPendingRow", func(t *testing.T, b *testBundle) uuid.UUID {
			_, a := b.rwStart(t, nil)
			return a.ID
		}, true},
		{"ClaimsPendingRowDueInThePast", func(t *testing.T, b *testBundle) uuid.UUID {
			_, a := b.rwStart(t, func(p *repo.StartParams) { p.AvailableAt = new(b.clock.Now().Add(-time.Hour)) })
			return a.ID
		}, true},
		{"SkipsPendingRowNotYetDue", func(t *testing.T, b *testBundle) uuid.UUID {
			_, a := b.rwStart(t, func(p *repo.StartParams) { p.AvailableAt = new(b.clock.Now().Add(time.Microsecond)) })
			return a.ID
		}, false},
		{"SkipsDeferredRow", func(t *testing.T, b *testBundle) uuid.UUID {
			_, a := b.rwStart(t, func(p *repo.StartParams) { p.Deferred = true })
			b.clock.Advance(24 * time.Hour)
			return a.ID
		}, false},
		{"ClaimsDispatchedRowAtVisibilityDeadline", func(t *testing.T, b *testBundle) uuid.UUID {
			_, a := b.rwStart(t, nil)
			b.rwDispatch(t, a.ID, "job-1", nil)
			b.clock.Advance(repo.VisibilityTimeoutDefault)
			return a.ID
		}, true},
		{"SkipsDispatchedRowWithinVisibility", func(t *testing.T, b *testBundle) uuid.UUID {
			_, a := b.rwStart(t, nil)
			b.rwDispatch(t, a.ID, "job-1", nil)
			b.clock.Advance(repo.VisibilityTimeoutDefault - time.Microsecond)
			return a.ID
		}, false},
		{"ClaimsLeasedRowAtLeaseExpiry", func(t *testing.T, b *testBundle) uuid.UUID {
			_, lease, _ := b.rwRunning(t, nil)
			b.clock.Advance(repo.LeaseDurationDefault)
			return lease.AttemptID
		}, true},
		{"SkipsLeasedRowWithLiveLease", func(t *testing.T, b *testBundle) uuid.UUID {
			_, lease, _ := b.rwRunning(t, nil)
			b.clock.Advance(repo.LeaseDurationDefault - time.Microsecond)
			return lease.AttemptID
		}, false},
		{"RecoversDispatchingRowWithExpiredLock", func(t *testing.T, b *testBundle) uuid.UUID {
			_, a := b.rwStart(t, nil)
			b.rwClaim(t, "relay-dead")
			b.clock.Advance(repo.LockDurationDefault)
			return a.ID
		}, true},
		{"SkipsDispatchingRowWithLiveLock", func(t *testing.T, b *testBundle) uuid.UUID {
			_, a := b.rwStart(t, nil)
			b.rwClaim(t, "relay-other")
			b.clock.Advance(repo.LockDurationDefault - time.Microsecond)
			return a.ID
		}, false},
		{"ClaimsRetryWaitRowAtRetryAt", func(t *testing.T, b *testBundle) uuid.UUID {
			_, lease, _ := b.rwRunning(t, nil)
			_, err := b.repo.ScheduleRetry(b.ctx, b.db.Pool, &repo.ScheduleRetryParams{Lease: lease, RetryDelay: 10 * time.Second, ErrorCode: "X", ErrorMessage: "x"})
			require.NoError(t, err)
			b.rwRows(t, lease.AttemptID)
			b.clock.Advance(10 * time.Second)
			return lease.AttemptID
		}, true},
		{"SkipsRetryWaitRowBeforeRetryAt", func(t *testing.T, b *testBundle) uuid.UUID {
			_, lease, _ := b.rwRunning(t, nil)
			_, err := b.repo.ScheduleRetry(b.ctx, b.db.Pool, &repo.ScheduleRetryParams{Lease: lease, RetryDelay: 10 * time.Second, ErrorCode: "X", ErrorMessage: "x"})
			require.NoError(t, err)
			b.rwRows(t, lease.AttemptID)
			b.clock.Advance(10*time.Second - time.Microsecond)
			return lease.AttemptID
		}, false},
		{"SkipsCompletedRow", func(t *testing.T, b *testBundle) uuid.UUID {
			s, lease, _ := b.rwRunning(t, nil)
			b.rwAdvanceTo(t, s, lease, kfstype.CheckpointSmokeEvalPassed)
			_, err := b.repo.Complete(b.ctx, b.db.Pool, lease)
			require.NoError(t, err)
			b.clock.Advance(24 * time.Hour)
			return lease.AttemptID
		}, false},
		{"SkipsDeadRow", func(t *testing.T, b *testBundle) uuid.UUID {
			_, lease, _ := b.rwRunning(t, nil)
			_, err := b.repo.Fail(b.ctx, b.db.Pool, &repo.FailParams{Lease: lease, ErrorCode: "X", ErrorMessage: "x"})
			require.NoError(t, err)
			b.rwRows(t, lease.AttemptID)
			b.clock.Advance(24 * time.Hour)
			return lease.AttemptID
		}, false},
		{"SkipsCanceledRow", func(t *testing.T, b *testBundle) uuid.UUID {
			s, a := b.rwStart(t, nil)
			_, err := b.repo.Cancel(b.ctx, b.db.Pool, &repo.CancelParams{AttemptRef: s.Ref(a.ID)})
			require.NoError(t, err)
			b.clock.Advance(24 * time.Hour)
			return a.ID
		}, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			b := setup(t)
			id := tc.build(t, b)
			before := b.rwRows(t, id)
			msgs, err := b.repo.ClaimOutbox(b.ctx, b.db.Pool, &repo.ClaimParams{RelayID: "relay-a", BatchSize: 10, LockDuration: 45 * time.Second})
			require.NoError(t, err)
			after := b.rwRows(t, id)
			if !tc.due {
				require.Empty(t, msgs)
				require.Equal(t, before, after)
				return
			}
			require.Len(t, msgs, 1)
			m := msgs[0]
			require.NotNil(t, m.LockToken)
			require.NotEqual(t, uuid.Nil, *m.LockToken)
			if before.Outbox.LockToken != nil {
				require.NotEqual(t, *before.Outbox.LockToken, *m.LockToken, "a recovered row needs a fresh token")
			}
			want := wantClaimed(before, m, "relay-a", b.clock.Now(), 45*time.Second)
			require.Equal(t, want, after, "only the outbox row changes; the attempt is untouched")
			require.Equal(t, want.Outbox, *m)
		})
	}

	t.Run("ClaimsOldestDueFirstUpToBatchSize", func(t *testing.T) {
		b := setup(t)
		t0 := b.clock.Now()
		at := func(d time.Duration) func(*repo.StartParams) {
			return func(p *repo.StartParams) { p.AvailableAt = new(t0.Add(d)) }
		}
		_, first := b.rwStart(t, at(-30*time.Second))
		_, tieC := b.rwStart(t, at(-20*time.Second))
		_, tieD := b.rwStart(t, at(-20*time.Second))
		_, last := b.rwStart(t, at(-10*time.Second))
		b.clock.Advance(time.Second)
		_, later := b.rwStart(t, at(-20*time.Second)) // same available_at as C and D, created later
		_, notDue := b.rwStart(t, at(time.Hour))
		// Equal available_at and created_at: the outbox id decides (uuid
		// order is byte order, as the canonical string's).
		if b.rwRows(t, tieD.ID).Outbox.ID.String() < b.rwRows(t, tieC.ID).Outbox.ID.String() {
			tieC, tieD = tieD, tieC
		}
		notDueBefore := b.rwRows(t, notDue.ID)

		claim := func(n int32) []uuid.UUID {
			msgs, err := b.repo.ClaimOutbox(b.ctx, b.db.Pool, &repo.ClaimParams{RelayID: "relay-a", BatchSize: n})
			require.NoError(t, err)
			require.LessOrEqual(t, len(msgs), int(n))
			ids := make([]uuid.UUID, len(msgs))
			for i, m := range msgs {
				ids[i] = m.AttemptID
				b.rwRows(t, m.AttemptID)
			}
			return ids
		}
		require.Equal(t, []uuid.UUID{first.ID, tieC.ID}, claim(2))
		require.Equal(t, []uuid.UUID{tieD.ID}, claim(1))
		require.Equal(t, []uuid.UUID{later.ID, last.ID}, claim(100))
		require.Empty(t, claim(100))
		b.requireUnchanged(t, notDueBefore)
	})

	t.Run("GivesEachRowItsOwnTokenAndTheDefaultLock", func(t *testing.T) {
		b := setup(t)
		var befores []*testfactory.Rows
		for range 3 {
			_, a := b.rwStart(t, nil)
			befores = append(befores, b.rwRows(t, a.ID))
		}
		b.clock.Advance(5 * time.Second)
		msgs, err := b.repo.ClaimOutbox(b.ctx, b.db.Pool, &repo.ClaimParams{RelayID: "relay-a", BatchSize: 3})
		require.NoError(t, err)
		require.Len(t, msgs, 3)
		tokens := map[uuid.UUID]bool{}
		for _, m := range msgs {
			require.NotNil(t, m.LockToken)
			require.NotEqual(t, uuid.Nil, *m.LockToken)
			tokens[*m.LockToken] = true
		}
		require.Len(t, tokens, 3, "tokens must be distinct per row")
		for i, before := range befores {
			m := msgs[i]
			require.Equal(t, before.Attempt.ID, m.AttemptID, "claim order is available_at, created_at, id")
			want := wantClaimed(before, m, "relay-a", b.clock.Now(), repo.LockDurationDefault)
			require.Equal(t, want, b.rwRows(t, before.Attempt.ID))
		}
	})

	t.Run("SkipsRowsLockedByAnotherTransaction", func(t *testing.T) {
		b := setup(t)
		_, locked := b.rwStart(t, nil)
		_, free := b.rwStart(t, nil)
		lockedBefore := b.rwRows(t, locked.ID)

		tx, err := b.db.Pool.Begin(b.ctx)
		require.NoError(t, err)
		defer func() { _ = tx.Rollback(context.WithoutCancel(b.ctx)) }()
		_, err = tx.Exec(b.ctx, `SELECT id FROM document_compilation_outbox WHERE attempt_id = $1 FOR UPDATE`, locked.ID)
		require.NoError(t, err)

		// A claim that waited for the lock would run into the deadline.
		ctx, cancel := context.WithTimeout(b.ctx, 5*time.Second)
		defer cancel()
		msgs, err := b.repo.ClaimOutbox(ctx, b.db.Pool, &repo.ClaimParams{RelayID: "relay-a", BatchSize: 10})
		require.NoError(t, err)
		require.Len(t, msgs, 1)
		require.Equal(t, free.ID, msgs[0].AttemptID)
		require.NoError(t, ctx.Err())
		b.requireUnchanged(t, lockedBefore)

		require.NoError(t, tx.Rollback(b.ctx))
		msgs, err = b.repo.ClaimOutbox(b.ctx, b.db.Pool, &repo.ClaimParams{RelayID: "relay-a", BatchSize: 10})
		require.NoError(t, err)
		require.Len(t, msgs, 1)
		require.Equal(t, locked.ID, msgs[0].AttemptID)
		b.rwRows(t, locked.ID)
	})

	t.Run("ConcurrentClaimersNeverShareARow", func(t *testing.T) {
		b := setup(t)
		const rows, claimers = 40, 6
		ids := map[uuid.UUID]bool{}
		for range rows {
			_, a := b.rwStart(t, nil)
			ids[a.ID] = true
		}
		var (
			mu      sync.Mutex
			claimed = map[uuid.UUID][]string{}
			wg      sync.WaitGroup
			errs    = make(chan error, claimers)
		)
		for i := range claimers {
			relay := "relay-" + string(rune('a'+i))
			wg.Go(func() {
				for {
					msgs, err := b.repo.ClaimOutbox(b.ctx, b.db.Pool, &repo.ClaimParams{RelayID: relay, BatchSize: 3})
					if err != nil {
						errs <- err
						return
					}
					if len(msgs) == 0 {
						return
					}
					mu.Lock()
					for _, m := range msgs {
						claimed[m.AttemptID] = append(claimed[m.AttemptID], relay)
					}
					mu.Unlock()
				}
			})
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			require.NoError(t, err)
		}
		require.Len(t, claimed, rows)
		for id, by := range claimed {
			require.True(t, ids[id])
			require.Len(t, by, 1, "attempt %s claimed by %v", id, by)
			r := b.rwRows(t, id)
			require.Equal(t, by[0], *r.Outbox.LockedBy)
			require.EqualValues(t, 1, r.Outbox.DispatchAttempts)
		}
	})

	t.Run("RejectsInvalidInput", func(t *testing.T) {
		b := setup(t)
		_, a := b.rwStart(t, nil)
		before := b.rwRows(t, a.ID)
		for _, tc := range []struct {
			field string
			p     repo.ClaimParams
		}{
			{"BatchSize", repo.ClaimParams{RelayID: "relay-a", BatchSize: 0}},
			{"BatchSize", repo.ClaimParams{RelayID: "relay-a", BatchSize: 101}},
			{"BatchSize", repo.ClaimParams{RelayID: "relay-a", BatchSize: -1}},
			{"RelayID", repo.ClaimParams{RelayID: "", BatchSize: 1}},
			{"RelayID", repo.ClaimParams{RelayID: strings.Repeat("r", 256), BatchSize: 1}},
			{"LockDuration", repo.ClaimParams{RelayID: "relay-a", BatchSize: 1, LockDuration: -time.Second}},
		} {
			msgs, err := b.repo.ClaimOutbox(b.ctx, b.db.Pool, &tc.p)
			requireInputError(t, err, tc.field)
			require.Nil(t, msgs)
			b.requireUnchanged(t, before)
		}
	})
}

// wantMarked is before with the claimed outbox row marked dispatched at
// now and the attempt queued (or still running) with the job ids.
func wantMarked(before *testfactory.Rows, job string, ext *string, now time.Time, visibility time.Duration) *testfactory.Rows {
	want := *before
	want.Outbox.Status = kfstype.OutboxStatusDispatched
	want.Outbox.DeliveredAt = new(now)
	want.Outbox.QueueJobID = new(job)
	want.Outbox.ExternalJobID = ext
	want.Outbox.LockedBy, want.Outbox.LockToken, want.Outbox.LockedUntil = nil, nil, nil
	want.Outbox.AvailableAt = now.Add(visibility)
	want.Outbox.UpdatedAt = now
	if want.Attempt.RunState != kfstype.RunStateRunning {
		want.Attempt.RunState = kfstype.RunStateQueued
	}
	want.Attempt.QueueJobID = new(job)
	want.Attempt.ExternalJobID = ext
	want.Attempt.RetryAt = nil
	want.Attempt.RowVersion++
	want.Attempt.UpdatedAt = now
	return &want
}

func TestMarkDispatched(t *testing.T) {
	t.Parallel()

	t.Run("MarksEveryRowOfABatch", func(t *testing.T) {
		b := setup(t)
		// A retry_wait attempt, due in 10 s.
		_, lease, _ := b.rwRunning(t, nil)
		retrying := lease.AttemptID
		_, err := b.repo.ScheduleRetry(b.ctx, b.db.Pool, &repo.ScheduleRetryParams{Lease: lease, RetryDelay: 10 * time.Second, ErrorCode: "E", ErrorMessage: "e"})
		require.NoError(t, err)
		b.rwRows(t, retrying)
		// A queued attempt whose visibility deadline passes: republished.
		_, requeued := b.rwStart(t, nil)
		b.rwDispatch(t, requeued.ID, "job-old", new("ext-old"))
		b.clock.Advance(repo.VisibilityTimeoutDefault)
		// A fresh one.
		_, fresh := b.rwStart(t, nil)

		claimed := b.rwClaim(t, "relay-a")
		require.Len(t, claimed, 3)
		b.clock.Advance(2 * time.Second)
		befores := map[uuid.UUID]*testfactory.Rows{}
		for id := range claimed {
			befores[id] = b.rwRows(t, id)
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
			want := wantMarked(befores[id], j.job, j.ext, b.clock.Now(), 90*time.Second)
			require.Equal(t, kfstype.RunStateQueued, want.Attempt.RunState)
			after := b.rwRows(t, id)
			require.Equal(t, want, after, "attempt %s", id)
			require.Equal(t, after.Outbox, *marked[id])
		}
		require.Nil(t, b.rwRows(t, retrying).Attempt.RetryAt)
		require.Nil(t, b.rwRows(t, requeued.ID).Attempt.ExternalJobID, "a nil external id replaces the old one")
	})

	t.Run("KeepsRunningAttemptWithExpiredLeaseRunning", func(t *testing.T) {
		b := setup(t)
		_, lease, _ := b.rwRunning(t, nil)
		b.clock.Advance(repo.LeaseDurationDefault + time.Second)
		m := b.rwClaim(t, "relay-a")[lease.AttemptID]
		require.NotNil(t, m)
		before := b.rwRows(t, lease.AttemptID)
		res, err := b.repo.MarkDispatched(b.ctx, b.db.Pool, &repo.MarkDispatchedParams{Dispatches: []repo.Dispatch{{
			OutboxID: m.ID, LockToken: *m.LockToken, QueueJobID: "job-2", ExternalJobID: new("ext-2"),
		}}})
		require.NoError(t, err)
		require.Empty(t, res.Refused)
		want := wantMarked(before, "job-2", new("ext-2"), b.clock.Now(), repo.VisibilityTimeoutDefault)
		require.Equal(t, kfstype.RunStateRunning, want.Attempt.RunState)
		require.Equal(t, lease.Token, *want.Attempt.LeaseToken, "the expired lease stays until a worker takes over")
		require.Equal(t, want, b.rwRows(t, lease.AttemptID))
	})

	t.Run("RefusesStaleRowsAndMarksTheRest", func(t *testing.T) {
		b := setup(t)
		// takenOver: running, its lease expires, the relay claims the row,
		// then a worker takes the attempt over with the old delivery.
		_, oldLease, oldDel := b.rwRunning(t, nil)
		takenOver := oldLease.AttemptID
		b.clock.Advance(repo.LeaseDurationDefault)
		_, ok := b.rwStart(t, nil)
		_, wrongToken := b.rwStart(t, nil)
		_, reclaimed := b.rwStart(t, nil)
		sCanceled, canceled := b.rwStart(t, nil)
		_, marked := b.rwStart(t, nil)

		first := b.rwClaim(t, "relay-1")
		require.Len(t, first, 6)
		b.clock.Advance(repo.LockDurationDefault)
		second := b.rwClaim(t, "relay-2")
		require.Len(t, second, 6, "every lock expired: all recovered")

		_, err := b.repo.Cancel(b.ctx, b.db.Pool, &repo.CancelParams{AttemptRef: sCanceled.Ref(canceled.ID)})
		require.NoError(t, err)
		b.rwRows(t, canceled.ID)
		b.rwAcquire(t, oldDel, "worker-b")
		res, err := b.repo.MarkDispatched(b.ctx, b.db.Pool, &repo.MarkDispatchedParams{Dispatches: []repo.Dispatch{{
			OutboxID: second[marked.ID].ID, LockToken: *second[marked.ID].LockToken, QueueJobID: "job-marked",
		}}})
		require.NoError(t, err)
		require.Len(t, res.Marked, 1)
		b.rwRows(t, marked.ID)

		b.clock.Advance(time.Second)
		refusedIDs := []uuid.UUID{wrongToken.ID, reclaimed.ID, canceled.ID, takenOver, marked.ID}
		befores := map[uuid.UUID]*testfactory.Rows{ok.ID: b.rwRows(t, ok.ID)}
		for _, id := range refusedIDs {
			befores[id] = b.rwRows(t, id)
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
		want := wantMarked(befores[ok.ID], "job-new-"+ok.ID.String(), nil, b.clock.Now(), repo.VisibilityTimeoutDefault)
		require.Equal(t, want, b.rwRows(t, ok.ID))
		require.Equal(t, want.Outbox, *res.Marked[0])
		for _, id := range refusedIDs {
			b.requireUnchanged(t, befores[id])
		}
	})

	t.Run("RejectsInvalidInput", func(t *testing.T) {
		b := setup(t)
		_, a := b.rwStart(t, nil)
		m := b.rwClaim(t, "relay-a")[a.ID]
		before := b.rwRows(t, a.ID)
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
		require.Equal(t, wantMarked(before, strings.Repeat("j", 255), new(strings.Repeat("e", 255)), b.clock.Now(), repo.VisibilityTimeoutDefault), b.rwRows(t, a.ID))
	})
}

// wantBackedOff is before with the claimed row released for a retry.
func wantBackedOff(before *testfactory.Rows, msg string, now time.Time, backoff time.Duration) *testfactory.Rows {
	want := *before
	want.Outbox.Status = kfstype.OutboxStatusPending
	want.Outbox.AvailableAt = now.Add(backoff)
	want.Outbox.LastError = new(msg)
	want.Outbox.LockedBy, want.Outbox.LockToken, want.Outbox.LockedUntil = nil, nil, nil
	want.Outbox.UpdatedAt = now
	return &want
}

// wantDeadLettered is before with the row dead and the attempt failed.
func wantDeadLettered(before *testfactory.Rows, msg string, now time.Time) *testfactory.Rows {
	want := *before
	want.Outbox.Status = kfstype.OutboxStatusDead
	want.Outbox.LastError = new(msg)
	want.Outbox.LockedBy, want.Outbox.LockToken, want.Outbox.LockedUntil = nil, nil, nil
	want.Outbox.UpdatedAt = now
	a := &want.Attempt
	a.RunState = kfstype.RunStateFailed
	a.Active = false
	a.CompletedAt = new(now)
	a.WorkerID, a.LeaseToken, a.LeaseExpiresAt, a.HeartbeatAt = nil, nil, nil, nil
	a.RetryAt = nil
	a.LastErrorCode = new(kfstype.ErrorCodeOutboxDead)
	a.LastErrorMessage = new(msg)
	a.RowVersion++
	a.UpdatedAt = now
	return &want
}

func TestReleaseOutbox(t *testing.T) {
	t.Parallel()

	t.Run("BacksOff", func(t *testing.T) {
		b := setup(t)
		_, a := b.rwStart(t, nil)
		m := b.rwClaim(t, "relay-a")[a.ID]
		b.clock.Advance(2 * time.Second)
		before := b.rwRows(t, a.ID)
		got, err := b.repo.ReleaseOutbox(b.ctx, b.db.Pool, &repo.ReleaseOutboxParams{
			OutboxID: m.ID, LockToken: *m.LockToken, Backoff: 7 * time.Second, LastError: "broker down",
		})
		require.NoError(t, err)
		want := wantBackedOff(before, "broker down", b.clock.Now(), 7*time.Second)
		require.Equal(t, want, b.rwRows(t, a.ID), "the attempt is untouched")
		require.Equal(t, want.Outbox, *got)

		// Due again only after the backoff, with the attempt counted.
		b.clock.Advance(7*time.Second - time.Microsecond)
		require.Empty(t, b.rwClaim(t, "relay-a"))
		b.clock.Advance(time.Microsecond)
		again := b.rwClaim(t, "relay-a")[a.ID]
		require.NotNil(t, again)
		require.EqualValues(t, 2, again.DispatchAttempts)
	})

	t.Run("DeadLettersOnceDispatchAttemptsReachTheMaximum", func(t *testing.T) {
		b := setup(t)
		_, a := b.rwStart(t, nil)
		const maxAttempts = 3
		b.rwClaim(t, "relay-a")                   // 1: the relay dies
		b.clock.Advance(repo.LockDurationDefault) // its lock expires
		m := b.rwClaim(t, "relay-b")[a.ID]        // 2
		require.EqualValues(t, 2, m.DispatchAttempts)
		got, err := b.repo.ReleaseOutbox(b.ctx, b.db.Pool, &repo.ReleaseOutboxParams{
			OutboxID: m.ID, LockToken: *m.LockToken, Backoff: time.Second, MaxDispatchAttempts: maxAttempts, LastError: "try 2",
		})
		require.NoError(t, err)
		require.Equal(t, kfstype.OutboxStatusPending, got.Status)
		b.rwRows(t, a.ID)
		b.clock.Advance(time.Second)
		m = b.rwClaim(t, "relay-b")[a.ID] // 3
		require.EqualValues(t, maxAttempts, m.DispatchAttempts)
		b.clock.Advance(time.Second)
		before := b.rwRows(t, a.ID)
		got, err = b.repo.ReleaseOutbox(b.ctx, b.db.Pool, &repo.ReleaseOutboxParams{
			OutboxID: m.ID, LockToken: *m.LockToken, Backoff: time.Second, MaxDispatchAttempts: maxAttempts, LastError: "try 3",
		})
		require.NoError(t, err)
		want := wantDeadLettered(before, "try 3", b.clock.Now())
		require.Equal(t, want, b.rwRows(t, a.ID))
		require.Equal(t, want.Outbox, *got)
	})

	// Dead-lettering from every state a claimed row's attempt can be in.
	for _, tc := range []struct {
		name  string
		build func(t *testing.T, b *testBundle) uuid.UUID
	}{
		{"DeadLettersDispatchPendingAttempt", func(t *testing.T, b *testBundle) uuid.UUID {
			_, a := b.rwStart(t, nil)
			return a.ID
		}},
		{"DeadLettersRetryWaitAttempt", func(t *testing.T, b *testBundle) uuid.UUID {
			_, lease, _ := b.rwRunning(t, nil)
			_, err := b.repo.ScheduleRetry(b.ctx, b.db.Pool, &repo.ScheduleRetryParams{Lease: lease, RetryDelay: time.Second, ErrorCode: "E", ErrorMessage: "e"})
			require.NoError(t, err)
			b.rwRows(t, lease.AttemptID)
			b.clock.Advance(time.Second)
			return lease.AttemptID
		}},
		{"DeadLettersQueuedAttempt", func(t *testing.T, b *testBundle) uuid.UUID {
			_, a := b.rwStart(t, nil)
			b.rwDispatch(t, a.ID, "job-1", nil)
			b.clock.Advance(repo.VisibilityTimeoutDefault)
			return a.ID
		}},
		{"DeadLettersRunningAttemptWithExpiredLease", func(t *testing.T, b *testBundle) uuid.UUID {
			_, lease, _ := b.rwRunning(t, nil)
			b.clock.Advance(repo.LeaseDurationDefault)
			return lease.AttemptID
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := setup(t)
			id := tc.build(t, b)
			m := b.rwClaim(t, "relay-a")[id]
			require.NotNil(t, m)
			before := b.rwRows(t, id)
			got, err := b.repo.ReleaseOutbox(b.ctx, b.db.Pool, &repo.ReleaseOutboxParams{
				OutboxID: m.ID, LockToken: *m.LockToken, Backoff: time.Second, MaxDispatchAttempts: m.DispatchAttempts, LastError: "queue rejected the message",
			})
			require.NoError(t, err)
			want := wantDeadLettered(before, "queue rejected the message", b.clock.Now())
			require.Equal(t, want, b.rwRows(t, id))
			require.Equal(t, want.Outbox, *got)
		})
	}

	// A row the relay reclaimed at the lease's expiry by its clock while the
	// release's clock still sees the lease live (issue 13): the attempt is
	// not dead-lettered or backed off under its worker. The row goes back
	// to the lease (leased, due at the expiry, the error recorded) and the
	// attempt is untouched, so the worker keeps its lease.
	for _, tc := range []struct {
		name        string
		maxAttempts func(m *kfstype.OutboxMessage) int32
	}{
		{"DoesNotDeadLetterALiveLease", func(m *kfstype.OutboxMessage) int32 { return m.DispatchAttempts }},
		{"DoesNotBackOffALiveLease", func(m *kfstype.OutboxMessage) int32 { return m.DispatchAttempts + 1 }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := setup(t)
			_, lease, _ := b.rwRunning(t, nil)
			b.clock.Advance(repo.LeaseDurationDefault - time.Second)
			m := b.rwReclaim(t, lease)
			before := b.rwRows(t, lease.AttemptID)
			got, err := b.repo.ReleaseOutbox(b.ctx, b.db.Pool, &repo.ReleaseOutboxParams{
				OutboxID: m.ID, LockToken: *m.LockToken, Backoff: time.Second, MaxDispatchAttempts: tc.maxAttempts(m), LastError: "queue rejected the message",
			})
			require.NoError(t, err)
			want := wantBackedOff(before, "queue rejected the message", b.clock.Now(), 0)
			want.Outbox.Status = kfstype.OutboxStatusLeased
			want.Outbox.AvailableAt = *before.Attempt.LeaseExpiresAt
			require.Equal(t, want, b.rwRows(t, lease.AttemptID))
			require.Equal(t, want.Outbox, *got)

			// The worker's lease holds: it heartbeats and completes.
			_, err = b.repo.Heartbeat(b.ctx, b.db.Pool, &repo.HeartbeatParams{Lease: lease})
			require.NoError(t, err)
			b.rwRows(t, lease.AttemptID)
		})
	}

	t.Run("RefusesWithoutTheLock", func(t *testing.T) {
		t.Parallel()
		for _, tc := range []struct {
			name string
			// build returns the outbox row as claimed and the token to present.
			build func(t *testing.T, b *testBundle) (uuid.UUID, *kfstype.OutboxMessage, uuid.UUID)
		}{
			{"WrongToken", func(t *testing.T, b *testBundle) (uuid.UUID, *kfstype.OutboxMessage, uuid.UUID) {
				_, a := b.rwStart(t, nil)
				m := b.rwClaim(t, "relay-a")[a.ID]
				return a.ID, m, uuid.New()
			}},
			{"TokenOfAnExpiredClaim", func(t *testing.T, b *testBundle) (uuid.UUID, *kfstype.OutboxMessage, uuid.UUID) {
				_, a := b.rwStart(t, nil)
				m := b.rwClaim(t, "relay-a")[a.ID]
				b.clock.Advance(repo.LockDurationDefault)
				require.NotNil(t, b.rwClaim(t, "relay-b")[a.ID])
				return a.ID, m, *m.LockToken
			}},
			{"RowAlreadyReleased", func(t *testing.T, b *testBundle) (uuid.UUID, *kfstype.OutboxMessage, uuid.UUID) {
				_, a := b.rwStart(t, nil)
				m := b.rwClaim(t, "relay-a")[a.ID]
				_, err := b.repo.ReleaseOutbox(b.ctx, b.db.Pool, &repo.ReleaseOutboxParams{OutboxID: m.ID, LockToken: *m.LockToken, Backoff: time.Second, LastError: "x"})
				require.NoError(t, err)
				return a.ID, m, *m.LockToken
			}},
			{"RowAlreadyMarked", func(t *testing.T, b *testBundle) (uuid.UUID, *kfstype.OutboxMessage, uuid.UUID) {
				_, a := b.rwStart(t, nil)
				m := b.rwClaim(t, "relay-a")[a.ID]
				_, err := b.repo.MarkDispatched(b.ctx, b.db.Pool, &repo.MarkDispatchedParams{Dispatches: []repo.Dispatch{{OutboxID: m.ID, LockToken: *m.LockToken, QueueJobID: "job-1"}}})
				require.NoError(t, err)
				return a.ID, m, *m.LockToken
			}},
			{"AttemptCanceledMeanwhile", func(t *testing.T, b *testBundle) (uuid.UUID, *kfstype.OutboxMessage, uuid.UUID) {
				s, a := b.rwStart(t, nil)
				m := b.rwClaim(t, "relay-a")[a.ID]
				_, err := b.repo.Cancel(b.ctx, b.db.Pool, &repo.CancelParams{AttemptRef: s.Ref(a.ID)})
				require.NoError(t, err)
				return a.ID, m, *m.LockToken
			}},
		} {
			t.Run(tc.name, func(t *testing.T) {
				b := setup(t)
				id, m, token := tc.build(t, b)
				before := b.rwRows(t, id)
				for _, max := range []int32{0, 1} { // backing off and dead-lettering alike
					got, err := b.repo.ReleaseOutbox(b.ctx, b.db.Pool, &repo.ReleaseOutboxParams{
						OutboxID: m.ID, LockToken: token, Backoff: time.Second, MaxDispatchAttempts: max, LastError: "late",
					})
					require.ErrorIs(t, err, repo.ErrOutboxLockLost)
					require.Nil(t, got)
					b.requireUnchanged(t, before)
				}
			})
		}
	})

	t.Run("RefusesUnknownRow", func(t *testing.T) {
		b := setup(t)
		_, err := b.repo.ReleaseOutbox(b.ctx, b.db.Pool, &repo.ReleaseOutboxParams{OutboxID: uuid.New(), LockToken: uuid.New(), Backoff: time.Second, LastError: "x"})
		require.ErrorIs(t, err, repo.ErrOutboxLockLost)
	})

	t.Run("RejectsInvalidInput", func(t *testing.T) {
		b := setup(t)
		_, a := b.rwStart(t, nil)
		m := b.rwClaim(t, "relay-a")[a.ID]
		before := b.rwRows(t, a.ID)
		good := repo.ReleaseOutboxParams{OutboxID: m.ID, LockToken: *m.LockToken, Backoff: time.Second, LastError: "x"}
		for _, tc := range []struct {
			field string
			edit  func(*repo.ReleaseOutboxParams)
		}{
			{"OutboxID", func(p *repo.ReleaseOutboxParams) { p.OutboxID = uuid.Nil }},
			{"LockToken", func(p *repo.ReleaseOutboxParams) { p.LockToken = uuid.Nil }},
			{"Backoff", func(p *repo.ReleaseOutboxParams) { p.Backoff = 0 }},
			{"Backoff", func(p *repo.ReleaseOutboxParams) { p.Backoff = -time.Second }},
			{"MaxDispatchAttempts", func(p *repo.ReleaseOutboxParams) { p.MaxDispatchAttempts = -1 }},
			{"LastError", func(p *repo.ReleaseOutboxParams) { p.LastError = "" }},
		} {
			p := good
			tc.edit(&p)
			got, err := b.repo.ReleaseOutbox(b.ctx, b.db.Pool, &p)
			requireInputError(t, err, tc.field)
			require.Nil(t, got)
			b.requireUnchanged(t, before)
		}
	})
}
