package repo_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/knowledgefs/kfsdb/kfstype"
	"github.com/knowledgefs/kfsdb/repo"
	"github.com/knowledgefs/kfsdb/tests/testfactory"
)

// EnvRaceIterations overrides TestHeartbeatReclaimRace's iteration count.
const EnvRaceIterations = "KFS_RACE_ITERATIONS"

// TestHeartbeatReclaimRace drives heartbeats and the relay's claims across
// a lease's expiry (issue 13): in each iteration the worker's clock is a
// little before the lease's expiry and the relay's at or a little after
// it, and the two run in both orders, at once, and with the heartbeat in
// an open caller transaction (held across the claim, or begun before it).
// After every step the rows must satisfy testfactory's invariants: the
// pairing table, a leased row due at the lease's expiry, and a running
// attempt's row away from leased only once that lease had expired. Each
// call's outcome must be the one the order implies. A reclaimed row is
// taken back by a takeover (the old delivery, or a redelivery) or handed
// back to the live lease by ReleaseOutbox, and the next iteration starts.
func TestHeartbeatReclaimRace(t *testing.T) {
	b := setup(t)
	iterations := 2000
	if v := os.Getenv(EnvRaceIterations); v != "" {
		n, err := strconv.Atoi(v)
		require.NoError(t, err, EnvRaceIterations)
		iterations = n
	}
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d, %d iterations", seed, iterations)
	rc := &reclaimRace{b: b, pool: fastPool(t, b), rng: rand.New(rand.NewPCG(seed, 0)), counts: map[string]int{}}
	s := b.scope(t)
	p := s.StartParams()
	p.MaxExecutionAttempts = 1 << 30
	res, err := b.repo.Start(b.ctx, rc.pool, p)
	require.NoError(t, err)
	rc.id = res.Attempt.ID
	rc.delivery = b.drv.Dispatch(b.ctx, t, rc.id, &testfactory.DispatchOpts{QueueJobID: new("job-0")})
	_, rc.lease = b.drv.Acquire(b.ctx, t, rc.delivery, &testfactory.AcquireOpts{WorkerID: new("worker-race")})

	modes := []struct {
		name string
		run  func(t *testing.T)
	}{
		{"HeartbeatThenClaim", rc.heartbeatThenClaim},
		{"ClaimThenHeartbeat", rc.claimThenHeartbeat},
		{"HeartbeatInOpenTxAcrossClaim", rc.heartbeatInOpenTx},
		{"ClaimThenHeartbeatInTxBegunBefore", rc.claimThenHeartbeatInOlderTx},
		{"AtOnce", rc.atOnce},
	}
	for i := range iterations {
		m := modes[rc.rng.IntN(len(modes))]
		rc.counts["mode "+m.name]++
		rc.step = fmt.Sprintf("iteration %d (%s)", i, m.name)
		m.run(t)
		rc.recover(t)
		if t.Failed() {
			t.FailNow()
		}
	}
	names := make([]string, 0, len(rc.counts))
	for k := range rc.counts {
		names = append(names, k)
	}
	sort.Strings(names)
	var report strings.Builder
	for _, k := range names {
		fmt.Fprintf(&report, "\n  %s: %d", k, rc.counts[k])
	}
	t.Logf("outcomes:%s", report.String())
	for _, m := range modes {
		require.Positive(t, rc.counts["mode "+m.name], m.name)
	}
	for _, k := range []string{"heartbeat renewed", "heartbeat lost", "claim reclaimed", "claim skipped the locked row"} {
		require.Positive(t, rc.counts[k], "no iteration saw %q", k)
	}
}

// fastPool is a pool on b's database whose commits do not wait for the
// WAL flush: the race runs thousands of short transactions, and the state
// machine is the same.
func fastPool(t *testing.T, b *testBundle) *pgxpool.Pool {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(b.db.URL)
	require.NoError(t, err)
	cfg.ConnConfig.RuntimeParams["synchronous_commit"] = "off"
	pool, err := pgxpool.NewWithConfig(b.ctx, cfg)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	return pool
}

// reclaimRace is the race's one attempt and what its worker and relay
// hold.
type reclaimRace struct {
	b        *testBundle
	pool     *pgxpool.Pool
	rng      *rand.Rand
	id       uuid.UUID
	lease    *repo.Lease
	delivery *repo.Delivery
	jobs     int
	step     string
	counts   map[string]int
}

// clocks returns a worker repo whose clock is 1 µs to 1 s before the
// lease's expiry and a relay repo whose clock is 0 to 1 s after it, and the
// relay's time.
func (rc *reclaimRace) clocks() (worker, relay *repo.Repo, relayNow time.Time) {
	e := rc.lease.ExpiresAt
	w := e.Add(-time.Duration(1+rc.rng.IntN(1_000_000)) * time.Microsecond)
	r := e.Add(time.Duration(rc.rng.IntN(1_000_000)) * time.Microsecond)
	return repo.New(&repo.Config{Clock: testfactory.ClockAt(w)}), repo.New(&repo.Config{Clock: testfactory.ClockAt(r)}), r
}

// leaseFor is a heartbeat's lease duration: 1 ms to 2 s, so a renewed
// lease is sometimes already due at the relay's clock.
func (rc *reclaimRace) leaseFor() time.Duration {
	return time.Duration(1+rc.rng.IntN(2000)) * time.Millisecond
}

// check reads the rows and checks every invariant.
func (rc *reclaimRace) check(t *testing.T) *testfactory.Rows {
	t.Helper()
	return testfactory.RequireInvariants(rc.b.ctx, t, rc.pool, rc.id)
}

func (rc *reclaimRace) heartbeat(db repo.DBTX, r *repo.Repo, d time.Duration) (*repo.Lease, error) {
	return r.Heartbeat(rc.b.ctx, db, &repo.HeartbeatParams{Lease: rc.lease, LeaseDuration: d})
}

// claim runs ClaimOutbox and says whether it took the attempt's row.
func (rc *reclaimRace) claim(t *testing.T, r *repo.Repo) bool {
	t.Helper()
	msgs, err := r.ClaimOutbox(rc.b.ctx, rc.pool, &repo.ClaimOutboxParams{RelayID: "relay-race", BatchSize: 1})
	require.NoError(t, err, rc.step)
	return len(msgs) == 1
}

// renewed records an applied heartbeat.
func (rc *reclaimRace) renewed(t *testing.T, got *repo.Lease, err error) {
	t.Helper()
	require.NoError(t, err, rc.step)
	rc.counts["heartbeat renewed"]++
	rc.lease = got
}

// lost requires a refused heartbeat that changed nothing.
func (rc *reclaimRace) lost(t *testing.T, err error, before *testfactory.Rows) {
	t.Helper()
	require.ErrorIs(t, err, repo.ErrLeaseLost, rc.step)
	rc.counts["heartbeat lost"]++
	require.Equal(t, before, rc.check(t), "%s: a refused heartbeat changed the rows", rc.step)
}

// claimed says whether a claim took the row, and requires it did exactly
// when the lease was due at the relay's clock.
func (rc *reclaimRace) claimed(t *testing.T, took bool, relayNow time.Time) {
	t.Helper()
	require.Equal(t, !rc.lease.ExpiresAt.After(relayNow), took, "%s: claim at %s of a lease expiring %s", rc.step, relayNow, rc.lease.ExpiresAt)
	if took {
		rc.counts["claim reclaimed"]++
	} else {
		rc.counts["claim found nothing due"]++
	}
}

func (rc *reclaimRace) heartbeatThenClaim(t *testing.T) {
	worker, relay, relayNow := rc.clocks()
	got, err := rc.heartbeat(rc.pool, worker, rc.leaseFor())
	rc.renewed(t, got, err)
	rc.check(t)
	rc.claimed(t, rc.claim(t, relay), relayNow)
	rc.check(t)
}

func (rc *reclaimRace) claimThenHeartbeat(t *testing.T) {
	worker, relay, relayNow := rc.clocks()
	rc.claimed(t, rc.claim(t, relay), relayNow)
	before := rc.check(t)
	_, err := rc.heartbeat(rc.pool, worker, rc.leaseFor())
	rc.lost(t, err, before)
}

// heartbeatInOpenTx: the heartbeat's transaction stays open across the
// relay's claim, which skips the locked row; after the commit the claim
// takes it only if the renewed lease is due.
func (rc *reclaimRace) heartbeatInOpenTx(t *testing.T) {
	worker, relay, relayNow := rc.clocks()
	rc.inTx(t, func(tx pgx.Tx) {
		got, err := rc.heartbeat(tx, worker, rc.leaseFor())
		rc.renewed(t, got, err)
		require.False(t, rc.claim(t, relay), "%s: claimed a row the heartbeat's transaction holds", rc.step)
		rc.counts["claim skipped the locked row"]++
		rc.check(t)
	})
	rc.check(t)
	rc.claimed(t, rc.claim(t, relay), relayNow)
	rc.check(t)
}

// claimThenHeartbeatInOlderTx: the caller's transaction began (and read
// the attempt) before the claim; the heartbeat in it sees the claim and
// is refused.
func (rc *reclaimRace) claimThenHeartbeatInOlderTx(t *testing.T) {
	worker, relay, relayNow := rc.clocks()
	rc.inTx(t, func(tx pgx.Tx) {
		testfactory.ReadRows(rc.b.ctx, t, tx, rc.id)
		rc.claimed(t, rc.claim(t, relay), relayNow)
		before := rc.check(t)
		_, err := rc.heartbeat(tx, worker, rc.leaseFor())
		rc.lost(t, err, before)
	})
	rc.check(t)
}

// atOnce starts the heartbeat and the claim together. Whichever wins, the
// outcomes agree: the heartbeat is refused only if the claim took the row
// before it, and a claim after an applied heartbeat takes the row only if
// the renewed lease is due.
func (rc *reclaimRace) atOnce(t *testing.T) {
	worker, relay, relayNow := rc.clocks()
	d := rc.leaseFor()
	start := make(chan struct{})
	type hb struct {
		lease *repo.Lease
		err   error
	}
	hbDone := make(chan hb, 1)
	go func() {
		<-start
		l, err := rc.heartbeat(rc.pool, worker, d)
		hbDone <- hb{l, err}
	}()
	close(start)
	took := rc.claim(t, relay)
	h := <-hbDone
	rows := rc.check(t)
	switch {
	case h.err == nil && !took:
		rc.counts["at once: heartbeat, nothing due"]++
		rc.renewed(t, h.lease, h.err)
		require.Equal(t, kfstype.OutboxStatusLeased, rows.Outbox.Status, rc.step)
	case h.err == nil && took:
		// The claim ran after the heartbeat and found the renewed lease due.
		rc.counts["at once: heartbeat, then claim"]++
		rc.renewed(t, h.lease, h.err)
		rc.claimed(t, took, relayNow)
	case errors.Is(h.err, repo.ErrLeaseLost) && took:
		rc.counts["at once: claim, then heartbeat refused"]++
		rc.counts["heartbeat lost"]++
		rc.claimed(t, took, relayNow)
		require.Equal(t, rc.lease.ExpiresAt, *rows.Attempt.LeaseExpiresAt, "%s: a refused heartbeat renewed the lease", rc.step)
	default:
		require.FailNow(t, "impossible outcome", "%s: heartbeat %v, claim took the row %v", rc.step, h.err, took)
	}
}

// inTx runs f in a caller transaction on the race's pool and commits it.
func (rc *reclaimRace) inTx(t *testing.T, f func(pgx.Tx)) {
	t.Helper()
	tx, err := rc.pool.Begin(rc.b.ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(context.WithoutCancel(rc.b.ctx)) }()
	f(tx)
	require.NoError(t, tx.Commit(rc.b.ctx), rc.step)
}

// recover brings a reclaimed row back to a lease: another worker takes
// over with the old delivery or, after the relay records a redelivery,
// with the new one (both at the relay's clock, after the expiry); or the
// relay's failed publication hands the row back to the lease it finds
// live by a clock before the expiry (ReleaseOutbox, backing off or
// dead-lettering).
func (rc *reclaimRace) recover(t *testing.T) {
	t.Helper()
	rows := rc.check(t)
	if rows.Outbox.Status == kfstype.OutboxStatusLeased {
		return
	}
	require.Equal(t, kfstype.OutboxStatusDispatching, rows.Outbox.Status, rc.step)
	worker, relay, _ := rc.clocks()
	switch rc.rng.IntN(3) {
	case 0:
		rc.counts["recovered: takeover with the old delivery"]++
	case 1:
		rc.counts["recovered: takeover after a redelivery"]++
		rc.jobs++
		job := fmt.Sprintf("job-%d", rc.jobs)
		res, err := relay.MarkDispatched(rc.b.ctx, rc.pool, &repo.MarkDispatchedParams{Dispatches: []repo.Dispatch{{
			OutboxID: rows.Outbox.ID, LockToken: *rows.Outbox.LockToken, QueueJobID: job,
		}}})
		require.NoError(t, err, rc.step)
		require.Len(t, res.Marked, 1, rc.step)
		rc.check(t)
		rc.delivery = &repo.Delivery{AttemptID: rc.id, QueueJobID: job}
	default:
		rc.counts["recovered: release hands the row back to the live lease"]++
		maxAttempts := rows.Outbox.DispatchAttempts + int32(rc.rng.IntN(2)) // dead-letter or back off
		o, err := worker.ReleaseOutbox(rc.b.ctx, rc.pool, &repo.ReleaseOutboxParams{
			OutboxID: rows.Outbox.ID, LockToken: *rows.Outbox.LockToken, Backoff: time.Second, MaxDispatchAttempts: maxAttempts, LastError: "publish failed",
		})
		require.NoError(t, err, rc.step)
		require.Equal(t, kfstype.OutboxStatusLeased, o.Status, rc.step)
		after := rc.check(t)
		require.Equal(t, kfstype.RunStateRunning, after.Attempt.RunState, rc.step)
		return
	}
	_, lease, err := relay.AcquireLease(rc.b.ctx, rc.pool, &repo.AcquireLeaseParams{Delivery: *rc.delivery, WorkerID: "worker-race", LeaseDuration: rc.leaseFor()})
	require.NoError(t, err, rc.step)
	rc.lease = lease
	rc.check(t)
}
