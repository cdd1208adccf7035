package repo_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/knowledgefs/kfsdb/relay"
	"github.com/knowledgefs/kfsdb/repo"
)

// listeners returns the ids registered idle.
func (b *testBundle) listeners(t *testing.T) []string {
	t.Helper()
	rows, err := b.db.Pool.Query(b.ctx, `SELECT listener_id FROM document_compilation_outbox_idle_listeners ORDER BY 1`)
	require.NoError(t, err)
	ids, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	return ids
}

func (b *testBundle) idle(t *testing.T, id string, ttl time.Duration) *repo.OutboxListenerIdleResult {
	t.Helper()
	res, err := b.repo.OutboxListenerIdle(b.ctx, b.db.Pool, &repo.OutboxListenerIdleParams{ListenerID: id, TTL: ttl})
	require.NoError(t, err)
	return res
}

func TestOutboxListenerIdle(t *testing.T) {
	t.Run("RegistersThenRefreshes", func(t *testing.T) {
		b := setup(t)
		res := b.idle(t, "relay-a", time.Minute)
		require.Equal(t, &repo.OutboxListenerIdleResult{Registered: true, Inserted: true}, res, "nothing due, nothing registered before")
		res = b.idle(t, "relay-a", time.Minute)
		require.Equal(t, &repo.OutboxListenerIdleResult{Registered: true}, res, "a refresh is not a new registration")
		var expires time.Time
		require.NoError(t, b.db.Pool.QueryRow(b.ctx, `SELECT expires_at FROM document_compilation_outbox_idle_listeners WHERE listener_id = 'relay-a'`).Scan(&expires))
		require.Equal(t, b.clock.Now().Add(time.Minute), expires.UTC())
	})

	t.Run("RefusedWhileACommitChecks", func(t *testing.T) {
		b := setup(t)
		scope := b.scope(t)
		tx, err := b.db.Pool.Begin(b.ctx)
		require.NoError(t, err)
		defer func() { _ = tx.Rollback(context.WithoutCancel(b.ctx)) }()
		_, err = b.repo.Start(b.ctx, tx, scope.StartParams())
		require.NoError(t, err)
		// Fires the deferred wake-up check now; it holds the lock shared
		// until this transaction ends, as a commit in progress does.
		_, err = tx.Exec(b.ctx, `SET CONSTRAINTS ALL IMMEDIATE`)
		require.NoError(t, err)

		res := b.idle(t, "relay-a", time.Minute)
		require.False(t, res.Registered, "a new registration must not pass a commit that is checking")
		require.False(t, res.Inserted)
		require.Empty(t, b.listeners(t))

		require.NoError(t, tx.Commit(b.ctx))
		res = b.idle(t, "relay-a", time.Minute)
		require.True(t, res.Registered)
		require.True(t, res.Inserted)
		require.NotNil(t, res.NextDueIn)
		require.LessOrEqual(t, *res.NextDueIn, time.Duration(0), "the committed Start's row is due: claim before sleeping")
	})

	t.Run("RefreshNeedsNoLock", func(t *testing.T) {
		b := setup(t)
		b.idle(t, "relay-a", time.Minute)
		tx, err := b.db.Pool.Begin(b.ctx)
		require.NoError(t, err)
		defer func() { _ = tx.Rollback(context.WithoutCancel(b.ctx)) }()
		_, err = tx.Exec(b.ctx, `SELECT pg_advisory_xact_lock_shared(1801876324, 1)`)
		require.NoError(t, err)
		require.Equal(t, &repo.OutboxListenerIdleResult{Registered: true}, b.idle(t, "relay-a", time.Minute))
	})

	t.Run("ClaimThatFindsRowsEndsRegistration", func(t *testing.T) {
		b := setup(t)
		claim := func(relayID string) int {
			msgs, err := b.repo.ClaimOutbox(b.ctx, b.db.Pool, &repo.ClaimOutboxParams{RelayID: relayID, BatchSize: 10})
			require.NoError(t, err)
			return len(msgs)
		}
		b.idle(t, "relay-a", time.Minute)
		b.idle(t, "relay-b", time.Minute)
		require.Zero(t, claim("relay-a"))
		require.Equal(t, []string{"relay-a", "relay-b"}, b.listeners(t), "an empty claim keeps the relay idle")
		b.drv.Start(b.ctx, t, b.scope(t), nil)
		require.Equal(t, 1, claim("relay-a"))
		require.Equal(t, []string{"relay-b"}, b.listeners(t), "only the claiming relay is awake")
		require.NoError(t, b.repo.OutboxListenerAwake(b.ctx, b.db.Pool, &repo.OutboxListenerAwakeParams{ListenerID: "relay-b"}))
		require.Empty(t, b.listeners(t))
	})

	t.Run("DeletesOthersExpiredRegistrations", func(t *testing.T) {
		b := setup(t)
		b.idle(t, "relay-a", time.Second)
		b.idle(t, "relay-b", time.Hour)
		b.clock.Advance(2 * time.Second)
		b.idle(t, "relay-c", time.Minute)
		require.Equal(t, []string{"relay-b", "relay-c"}, b.listeners(t))
	})

	t.Run("NextDueIn", func(t *testing.T) {
		b := setup(t)
		require.Nil(t, b.idle(t, "relay-a", time.Minute).NextDueIn, "an empty outbox")

		deferred := b.scope(t).StartParams()
		deferred.Deferred = true
		_, err := b.repo.Start(b.ctx, b.db.Pool, deferred)
		require.NoError(t, err)
		require.Nil(t, b.idle(t, "relay-a", time.Minute).NextDueIn, "a deferred row never comes due by itself")

		later := b.scope(t).StartParams()
		later.AvailableAt = new(b.clock.Now().Add(90 * time.Second))
		_, err = b.repo.Start(b.ctx, b.db.Pool, later)
		require.NoError(t, err)
		require.Equal(t, new(90*time.Second), b.idle(t, "relay-a", time.Minute).NextDueIn)

		// A claimed row comes due again when its lock expires.
		now := b.drv.Start(b.ctx, t, b.scope(t), nil)
		_, err = b.repo.ClaimOutbox(b.ctx, b.db.Pool, &repo.ClaimOutboxParams{RelayID: "relay-b", BatchSize: 1, LockDuration: 30 * time.Second})
		require.NoError(t, err)
		require.Equal(t, new(30*time.Second), b.idle(t, "relay-a", time.Minute).NextDueIn, "attempt %s's claim", now.ID)
	})

	t.Run("InputErrors", func(t *testing.T) {
		b := setup(t)
		for _, p := range []*repo.OutboxListenerIdleParams{nil, {TTL: time.Second}, {ListenerID: "r"}, {ListenerID: "r", TTL: -time.Second}} {
			_, err := b.repo.OutboxListenerIdle(b.ctx, b.db.Pool, p)
			var inputErr *repo.InputError
			require.True(t, errors.As(err, &inputErr), "params %+v: %v", p, err)
		}
		require.ErrorIs(t, b.repo.OutboxListenerAwake(b.ctx, b.db.Pool, &repo.OutboxListenerAwakeParams{ListenerID: ""}), repo.ErrInvalidInput)
		require.Empty(t, b.listeners(t))
	})
}

// notifications is a connection LISTENing on the relay channel.
type notifications struct {
	b    *testBundle
	conn *pgx.Conn
}

func listenRelay(t *testing.T, b *testBundle) *notifications {
	t.Helper()
	conn, err := pgx.Connect(b.ctx, b.db.URL)
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close(context.WithoutCancel(b.ctx)) })
	_, err = conn.Exec(b.ctx, "LISTEN "+relay.NotifyChannel)
	require.NoError(t, err)
	return &notifications{b: b, conn: conn}
}

// next sends a sentinel notification and returns the payloads that arrived
// before it: notifications are delivered in commit order, so this is what
// every transaction committed so far sent, with no sleep.
func (n *notifications) next(t *testing.T) []string {
	t.Helper()
	_, err := n.b.db.Pool.Exec(n.b.ctx, `SELECT pg_notify($1, 'sentinel')`, relay.NotifyChannel)
	require.NoError(t, err)
	var got []string
	for {
		ctx, cancel := context.WithTimeout(n.b.ctx, 10*time.Second)
		msg, err := n.conn.WaitForNotification(ctx)
		cancel()
		require.NoError(t, err)
		if msg.Payload == "sentinel" {
			return got
		}
		got = append(got, msg.Payload)
	}
}

// TestCommitNotifiesOnlyIdleRelays: the deferred trigger of migration 0007
// notifies at commit, and only while a relay is registered idle, so a busy
// system's commits never take PostgreSQL's notify lock.
func TestCommitNotifiesOnlyIdleRelays(t *testing.T) {
	b := setup(t)
	n := listenRelay(t, b)

	b.drv.Start(b.ctx, t, b.scope(t), nil)
	require.Empty(t, n.next(t), "no relay is idle: a Start notifies nobody")

	b.idle(t, "relay-a", time.Minute)
	tx, err := b.db.Pool.Begin(b.ctx)
	require.NoError(t, err)
	_, err = b.repo.Start(b.ctx, tx, b.scope(t).StartParams())
	require.NoError(t, err)
	require.Empty(t, n.next(t), "nothing before the caller's commit")
	require.NoError(t, tx.Commit(b.ctx))
	require.Len(t, n.next(t), 1, "the commit notifies the idle relay")

	parkedScope := b.scope(t)
	deferred := parkedScope.StartParams()
	deferred.Deferred = true
	parked, err := b.repo.Start(b.ctx, b.db.Pool, deferred)
	require.NoError(t, err)
	require.Empty(t, n.next(t), "a deferred row wakes nobody")
	// The commit above took relay-a's registration as it woke it
	// (migration 0010); it registers again before it sleeps.
	b.idle(t, "relay-a", time.Minute)
	_, err = b.repo.ReleaseDeferred(b.ctx, b.db.Pool, &repo.ReleaseDeferredParams{AttemptRef: parkedScope.Ref(parked.Attempt.ID)})
	require.NoError(t, err)
	require.Len(t, n.next(t), 1, "releasing it does")

	rolledBack, err := b.db.Pool.Begin(b.ctx)
	require.NoError(t, err)
	_, err = b.repo.Start(b.ctx, rolledBack, b.scope(t).StartParams())
	require.NoError(t, err)
	require.NoError(t, rolledBack.Rollback(b.ctx))
	require.Empty(t, n.next(t), "a rolled-back Start notifies nobody")

	// The relay claims, so it is busy: commits stop notifying.
	_, err = b.repo.ClaimOutbox(b.ctx, b.db.Pool, &repo.ClaimOutboxParams{RelayID: "relay-a", BatchSize: 100})
	require.NoError(t, err)
	b.drv.Start(b.ctx, t, b.scope(t), nil)
	require.Empty(t, n.next(t))

	// Under REPEATABLE READ the check could read an old snapshot: always
	// notify.
	rr, err := b.db.Pool.BeginTx(b.ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead})
	require.NoError(t, err)
	_, err = b.repo.Start(b.ctx, rr, b.scope(t).StartParams())
	require.NoError(t, err)
	require.NoError(t, rr.Commit(b.ctx))
	require.Len(t, n.next(t), 1)
}

// TestCommitWakesOneIdleListenerPerRow: a commit wakes one registered idle
// listener for each row it made due, naming it in the payload and taking
// its registration out (migration 0010), not every listener: a fleet of
// idle processes is not woken whole by every Start (issue 40). Before
// 0010 every commit notified everyone, naming nobody.
func TestCommitWakesOneIdleListenerPerRow(t *testing.T) {
	b := setup(t)
	n := listenRelay(t, b)
	for _, id := range []string{"worker-a", "worker-b", "worker-c"} {
		b.idle(t, id, time.Minute)
	}

	b.drv.Start(b.ctx, t, b.scope(t), nil)
	woken := namedIn(t, n.next(t))
	require.Len(t, woken, 1, "one row due: one listener woken")
	left := b.listeners(t)
	require.Len(t, left, 2)
	require.NotContains(t, left, woken[0], "the woken listener's registration is taken out")

	tx, err := b.db.Pool.Begin(b.ctx)
	require.NoError(t, err)
	for range 3 {
		_, err = b.repo.Start(b.ctx, tx, b.scope(t).StartParams())
		require.NoError(t, err)
	}
	require.NoError(t, tx.Commit(b.ctx))
	woken = namedIn(t, n.next(t))
	slices.Sort(woken)
	require.Equal(t, left, woken, "three rows due, two listeners left: both woken, once each")
	require.Empty(t, b.listeners(t))

	b.drv.Start(b.ctx, t, b.scope(t), nil)
	require.Empty(t, n.next(t), "nobody registered: nobody notified")

	// A registration another transaction holds (its listener refreshing
	// it) cannot be taken; with no other left, the commit names it and
	// leaves it in place (migration 0013; 0010 woke everyone).
	b.idle(t, "worker-a", time.Minute)
	holder, err := b.db.Pool.Begin(b.ctx)
	require.NoError(t, err)
	defer func() { _ = holder.Rollback(context.WithoutCancel(b.ctx)) }()
	_, err = holder.Exec(b.ctx, `SELECT 1 FROM document_compilation_outbox_idle_listeners WHERE listener_id = 'worker-a' FOR UPDATE`)
	require.NoError(t, err)
	b.drv.Start(b.ctx, t, b.scope(t), nil)
	require.Equal(t, []string{"worker-a"}, namedIn(t, n.next(t)), "a held registration: its listener is named")
	require.NoError(t, holder.Rollback(b.ctx))
	require.Equal(t, []string{"worker-a"}, b.listeners(t))
}

// namedIn returns the listeners that payloads name, failing on one that
// names nobody (every listener wakes).
func namedIn(t *testing.T, payloads []string) []string {
	t.Helper()
	var ids []string
	for _, p := range payloads {
		_, id, ok := strings.Cut(p, "|")
		require.True(t, ok, "payload %q names no listener: every listener wakes", p)
		ids = append(ids, id)
	}
	return ids
}

// TestCommitNamesTheNextFreeRegistration: a registration another
// transaction holds (its listener refreshing it, or another commit that
// took it and has not finished) is skipped for the next in order (the
// latest refreshed first), not answered by waking everyone. When every
// registration is held, the commit names each of them and takes none
// (migration 0013); more than eight held, it wakes everyone. Mutations
// caught: the candidate taken without SKIP LOCKED (the Start waits for
// the refresh: its deadline fails it), the fallback taken whenever the
// first candidate is held (a payload naming nobody), candidates taken in
// another order (the wrong name), 0010's fallback to everyone (0013's Down:
// a payload naming nobody with two held), no cap (nine names).
func TestCommitNamesTheNextFreeRegistration(t *testing.T) {
	b := setup(t)
	n := listenRelay(t, b)
	// Refreshed last first: worker-a, then b, c, d.
	for i, id := range []string{"worker-a", "worker-b", "worker-c", "worker-d"} {
		b.idle(t, id, time.Duration(4-i)*time.Minute)
	}
	start := func() {
		t.Helper()
		ctx, cancel := context.WithTimeout(b.ctx, 20*time.Second)
		defer cancel()
		_, err := b.repo.Start(ctx, b.db.Pool, b.scope(t).StartParams())
		require.NoError(t, err, "a commit must never wait for a held registration")
	}

	// worker-a refreshes its registration: its transaction holds the row.
	refresh, err := b.db.Pool.Begin(b.ctx)
	require.NoError(t, err)
	defer func() { _ = refresh.Rollback(context.WithoutCancel(b.ctx)) }()
	res, err := b.repo.OutboxListenerIdle(b.ctx, refresh, &repo.OutboxListenerIdleParams{ListenerID: "worker-a", TTL: 4 * time.Minute})
	require.NoError(t, err)
	require.Equal(t, &repo.OutboxListenerIdleResult{Registered: true}, res)
	start()
	require.Equal(t, []string{"worker-b"}, namedIn(t, n.next(t)), "worker-a is refreshing: the next is named")

	// Another commit has taken worker-c (its check ran) and not finished.
	other, err := b.db.Pool.Begin(b.ctx)
	require.NoError(t, err)
	defer func() { _ = other.Rollback(context.WithoutCancel(b.ctx)) }()
	_, err = b.repo.Start(b.ctx, other, b.scope(t).StartParams())
	require.NoError(t, err)
	_, err = other.Exec(b.ctx, `SET CONSTRAINTS ALL IMMEDIATE`)
	require.NoError(t, err)
	start()
	require.Equal(t, []string{"worker-d"}, namedIn(t, n.next(t)), "worker-a refreshing, worker-c taken by a commit in progress")

	// Every registration left is held: name them, the last refreshed
	// first, and take none.
	start()
	require.Equal(t, []string{"worker-a", "worker-c"}, namedIn(t, n.next(t)), "every registration held: each is named")

	require.NoError(t, other.Commit(b.ctx))
	require.Equal(t, []string{"worker-c"}, namedIn(t, n.next(t)), "the other commit wakes the one it took")
	require.NoError(t, refresh.Commit(b.ctx))
	require.Equal(t, []string{"worker-a"}, b.listeners(t))

	// More than eight held: wake everyone.
	for i := range 8 {
		b.idle(t, fmt.Sprintf("worker-%d", i), time.Minute)
	}
	all, err := b.db.Pool.Begin(b.ctx)
	require.NoError(t, err)
	defer func() { _ = all.Rollback(context.WithoutCancel(b.ctx)) }()
	_, err = all.Exec(b.ctx, `SELECT 1 FROM document_compilation_outbox_idle_listeners FOR UPDATE`)
	require.NoError(t, err)
	start()
	got := n.next(t)
	require.Len(t, got, 1)
	require.NotContains(t, got[0], "|", "nine registrations held: the commit names nobody, every listener wakes")
	require.NoError(t, all.Rollback(b.ctx))
	require.Len(t, b.listeners(t), 9)
}
