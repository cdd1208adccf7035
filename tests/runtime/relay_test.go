package runtime_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/knowledgefs/kfsdb/kfstype"
	"github.com/knowledgefs/kfsdb/observe"
	"github.com/knowledgefs/kfsdb/relay"
	"github.com/knowledgefs/kfsdb/repo"
	"github.com/knowledgefs/kfsdb/tests/testfactory"
)

// countingPublisher records every publication per outbox row and can fail
// them all.
type countingPublisher struct {
	fail  atomic.Bool
	delay time.Duration
	seq   atomic.Int64

	mu    sync.Mutex
	count map[uuid.UUID]int
	by    map[uuid.UUID][]int // publication sequence numbers per row
}

func newCountingPublisher() *countingPublisher {
	return &countingPublisher{count: map[uuid.UUID]int{}, by: map[uuid.UUID][]int{}}
}

func (p *countingPublisher) Publish(ctx context.Context, msg *relay.Message) (*relay.Publication, error) {
	if p.delay > 0 {
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(p.delay):
		}
	}
	if p.fail.Load() {
		return nil, errors.New("broker said no")
	}
	seq := p.seq.Add(1)
	p.mu.Lock()
	p.count[msg.ID]++
	p.by[msg.ID] = append(p.by[msg.ID], int(seq))
	p.mu.Unlock()
	return &relay.Publication{QueueJobID: fmt.Sprintf("job-%d", seq)}, nil
}

func (p *countingPublisher) published(id uuid.UUID) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.count[id]
}

func TestRelay(t *testing.T) {
	t.Parallel()

	t.Run("PublishErrorsBackOffThenDeadLetter", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t, 4)
		ctx, pool := e.ctx, e.pool
		_, started := e.start(t, 1, 1, 0)
		a := started[0]

		pub := newCountingPublisher()
		pub.fail.Store(true)
		var metrics observe.Counts
		const base, maxAttempts = 200 * time.Millisecond, 3
		rl := newRelay(t, pool, pub, relay.Config{
			PollOnly: true, BackoffBase: base, BackoffCap: 10 * base, MaxDispatchAttempts: maxAttempts, Metrics: &metrics,
		})

		for n := int32(1); n <= maxAttempts; n++ {
			// Due again only after the backoff: claim until it is.
			require.Eventually(t, func() bool {
				claimed, err := rl.RunOnce(ctx)
				require.NoError(t, err)
				return claimed == 1
			}, hangAfter, 20*time.Millisecond, "dispatch attempt %d", n)
			rows := testfactory.RequireInvariants(ctx, t, pool, a.ID)
			require.Equal(t, n, rows.Outbox.DispatchAttempts)
			require.Contains(t, *rows.Outbox.LastError, "broker said no")
			if n < maxAttempts {
				require.Equal(t, kfstype.OutboxStatusPending, rows.Outbox.Status)
				require.Equal(t, kfstype.RunStateDispatchPending, rows.Attempt.RunState)
				// min(cap, base·2^(n−1)) plus up to 20% jitter, from the write.
				want := base << (n - 1)
				got := rows.Outbox.AvailableAt.Sub(rows.Outbox.UpdatedAt)
				require.GreaterOrEqual(t, got, want, "backoff after attempt %d", n)
				require.LessOrEqual(t, got, want+want/5+time.Millisecond, "backoff after attempt %d", n)
				// Not claimable during the backoff (checked only if the
				// database clock is still inside it after the claim).
				claimed, err := rl.RunOnce(ctx)
				require.NoError(t, err)
				var now time.Time
				require.NoError(t, pool.QueryRow(ctx, `SELECT now()`).Scan(&now))
				if now.Before(rows.Outbox.AvailableAt) {
					require.Zero(t, claimed, "claimed during its backoff")
				}
			} else {
				require.Equal(t, kfstype.OutboxStatusDead, rows.Outbox.Status)
				require.Equal(t, kfstype.RunStateFailed, rows.Attempt.RunState)
				require.Equal(t, kfstype.ErrorCodeOutboxDead, *rows.Attempt.LastErrorCode)
				require.Contains(t, *rows.Attempt.LastErrorMessage, "broker said no")
			}
		}
		require.EqualValues(t, maxAttempts, metrics.Get(observe.PublishFailed))
		require.EqualValues(t, 1, metrics.Get(observe.DeadLettered))
		// A dead row is never claimed again.
		claimed, err := rl.RunOnce(ctx)
		require.NoError(t, err)
		require.Zero(t, claimed)
	})

	t.Run("ClaimOfDeadRelayIsRecoveredAfterLockExpiry", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t, 4)
		ctx, pool, r := e.ctx, e.pool, e.repo
		_, started := e.start(t, 1, 1, 0)
		a := started[0]

		// A relay claims the row and dies without marking or releasing it.
		dead, err := r.ClaimOutbox(ctx, pool, &repo.ClaimOutboxParams{RelayID: "relay-dead", BatchSize: 10, LockDuration: time.Second})
		require.NoError(t, err)
		require.Len(t, dead, 1)

		pub := newCountingPublisher()
		rl := newRelay(t, pool, pub, relay.Config{PollOnly: true, ID: "relay-alive"})
		claimed, err := rl.RunOnce(ctx)
		require.NoError(t, err)
		var now time.Time
		require.NoError(t, pool.QueryRow(ctx, `SELECT now()`).Scan(&now))
		if now.Before(*dead[0].LockedUntil) {
			require.Zero(t, claimed, "took a row another relay still holds")
		}
		require.Eventually(t, func() bool {
			claimed, err := rl.RunOnce(ctx)
			require.NoError(t, err)
			return claimed == 1
		}, hangAfter, 20*time.Millisecond)
		require.Equal(t, 1, pub.published(dead[0].ID))
		rows := testfactory.RequireInvariants(ctx, t, pool, a.ID)
		require.Equal(t, kfstype.OutboxStatusDispatched, rows.Outbox.Status)
		require.Equal(t, kfstype.RunStateQueued, rows.Attempt.RunState)
		require.EqualValues(t, 2, rows.Outbox.DispatchAttempts)

		// The dead relay's late mark is fenced off by its stale lock token.
		mark, err := r.MarkDispatched(ctx, pool, &repo.MarkDispatchedParams{Dispatches: []repo.Dispatch{{
			OutboxID: dead[0].ID, LockToken: *dead[0].LockToken, QueueJobID: "late-job",
		}}})
		require.NoError(t, err)
		require.Empty(t, mark.Marked)
		require.Equal(t, []uuid.UUID{dead[0].ID}, mark.Refused)
		_, err = r.ReleaseOutbox(ctx, pool, &repo.ReleaseOutboxParams{OutboxID: dead[0].ID, LockToken: *dead[0].LockToken, Backoff: time.Second, LastError: "late"})
		require.ErrorIs(t, err, repo.ErrOutboxLockLost)
		require.Equal(t, rows.Attempt.QueueJobID, testfactory.RequireInvariants(ctx, t, pool, a.ID).Attempt.QueueJobID)
	})

	t.Run("ConcurrentRelaysPublishEachRowOnce", func(t *testing.T) {
		t.Parallel()
		const n = 200
		e := newEnv(t, 12)
		ctx, pool := e.ctx, e.pool
		_, attempts := e.start(t, 2, n/2, 0)

		// A slow broker keeps claims of both relays in flight together.
		pub := newCountingPublisher()
		pub.delay = 2 * time.Millisecond
		var m1, m2 observe.Counts
		cfg := relay.Config{BatchSize: 10, Concurrency: 4, PollInterval: 50 * time.Millisecond, VisibilityTimeout: 10 * time.Minute}
		c1, c2 := cfg, cfg
		c1.ID, c2.ID, c1.Metrics, c2.Metrics = "relay-a", "relay-b", &m1, &m2
		stop := testfactory.RunAll(context.Background(), t, newRelay(t, pool, pub, c1).Run, newRelay(t, pool, pub, c2).Run)
		require.Eventually(t, func() bool {
			var dispatched int
			require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM document_compilation_outbox WHERE status = 'dispatched'`).Scan(&dispatched))
			return dispatched == n
		}, 60*time.Second, 20*time.Millisecond)
		stop()

		for _, a := range attempts {
			rows := testfactory.RequireInvariants(ctx, t, pool, a.ID)
			require.Equal(t, kfstype.RunStateQueued, rows.Attempt.RunState)
			require.EqualValues(t, 1, rows.Outbox.DispatchAttempts)
			require.Equal(t, 1, pub.published(rows.Outbox.ID), "row %s published more than once within one visibility window", rows.Outbox.ID)
		}
		require.EqualValues(t, n, m1.Get(observe.Published)+m2.Get(observe.Published))
		require.Zero(t, m1.Get(observe.MarkRefused)+m2.Get(observe.MarkRefused))
		t.Logf("relay-a published %d, relay-b %d", m1.Get(observe.Published), m2.Get(observe.Published))
	})
}

// publisherFunc adapts a function to relay.Publisher.
type publisherFunc func(ctx context.Context, msg *relay.Message) (*relay.Publication, error)

func (f publisherFunc) Publish(ctx context.Context, msg *relay.Message) (*relay.Publication, error) {
	return f(ctx, msg)
}

// TestRelayUnusableJobIDFailsOnlyItsPublication: a Publisher that returns
// a job id MarkDispatched cannot store (invalid UTF-8, NUL, too long, an
// empty external id) fails that one publication (backed off with the
// reason), and the rest of the batch is recorded as dispatched, instead
// of the whole batch staying unrecorded (and republished after its
// claims expire).
func TestRelayUnusableJobIDFailsOnlyItsPublication(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 4)
	ctx := e.ctx
	_, attempts := e.start(t, 1, 5, 0)
	empty := ""
	bad := map[uuid.UUID]*relay.Publication{
		attempts[0].ID: {QueueJobID: "job-\xff"},
		attempts[1].ID: {QueueJobID: "job-\x00"},
		attempts[2].ID: {QueueJobID: strings.Repeat("j", repo.MaxJobIDLength+1)},
		attempts[3].ID: {QueueJobID: "job-ok", ExternalJobID: &empty},
	}
	pub := publisherFunc(func(_ context.Context, msg *relay.Message) (*relay.Publication, error) {
		if p, ok := bad[msg.AttemptID]; ok {
			return p, nil
		}
		return &relay.Publication{QueueJobID: "job-" + msg.AttemptID.String()}, nil
	})
	rl := newRelay(t, e.pool, pub, relay.Config{PollOnly: true})
	n, err := rl.RunOnce(ctx)
	require.NoError(t, err)
	require.Equal(t, len(attempts), n)
	for _, a := range attempts {
		rows := testfactory.RequireInvariants(ctx, t, e.pool, a.ID)
		if _, isBad := bad[a.ID]; isBad {
			require.Equal(t, kfstype.OutboxStatusPending, rows.Outbox.Status, "backed off")
			require.Contains(t, *rows.Outbox.LastError, "unusable")
			continue
		}
		require.Equal(t, kfstype.OutboxStatusDispatched, rows.Outbox.Status)
		require.Equal(t, kfstype.RunStateQueued, rows.Attempt.RunState)
	}
}
