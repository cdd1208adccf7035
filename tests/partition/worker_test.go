package partition_test

import (
	"context"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/knowledgefs/kfsdb/kfstype"
	"github.com/knowledgefs/kfsdb/pgsource"
	"github.com/knowledgefs/kfsdb/repo"
	"github.com/knowledgefs/kfsdb/tests/partition"
	"github.com/knowledgefs/kfsdb/tests/pgtest"
	"github.com/knowledgefs/kfsdb/tests/testfactory"
	"github.com/knowledgefs/kfsdb/worker"
)

// cutLease is the cut-off worker's lease: short, so that the test is
// quick; the partition lasts until another worker has taken the attempt
// over, which is after this lease's expiry by the database's clock.
const cutLease = 3 * time.Second

// takeoverID is the worker in the test process that takes the attempt
// over once the cut-off worker's lease has expired.
const takeoverID = "takeover"

// clockSlack is how far the worker's clock may step against the
// database's between the lease and its end (both run on this host).
const clockSlack = 100 * time.Millisecond

// TestWorkerCutOffPastItsLease cuts a worker process (its own container)
// off from PostgreSQL while its handler runs, for longer than its lease:
// the handler's context must end at the lease's expiry without the
// database (the worker's local deadline); a worker in the test process
// leases the attempt and holds it at smoke_eval_passed; the route comes
// back, and every late write of the cut-off worker (heartbeat, progress,
// outcome; and the progress its handler writes when it ignored its
// context) must be refused by fencing; the cut-off worker then takes and
// completes a new attempt (it recovered); then the second worker
// completes, the first attempt's one terminal state. Two handlers: one
// that returns when its context ends, whose worker comes back with its
// address (its connections live on), and one that runs on regardless,
// whose worker comes back with another (its connections are dead).
func TestWorkerCutOffPastItsLease(t *testing.T) {
	for _, c := range []struct {
		handler    string
		newAddress bool
	}{{"honour", false}, {"ignore", true}} {
		t.Run(c.handler, func(t *testing.T) { testWorkerCutOff(t, c.handler, c.newAddress) })
	}
}

func testWorkerCutOff(t *testing.T, handler string, newAddress bool) {
	ctx := context.Background()
	db := pgtest.NewDB(t)
	r := repo.New(nil)
	testfactory.InstallLeaseAudit(ctx, t, db.Pool)
	testfactory.InstallStateAudit(ctx, t, db.Pool)
	docs := testfactory.SeedDocuments(ctx, t, db.Pool, 1, 2)
	attempt := testfactory.StartAll(ctx, t, r, db.Pool, docs[:1], 10)[0]

	cutID := "cut-" + handler
	cand := docs[0].Candidate
	cut := startProgram(t, cutID, "worker", "--database-url", programURL(t, db),
		"--id", cutID, "--lease", cutLease.String(), "--handler", handler, "--candidate", cand.ID.String()+","+cand.Fingerprint)
	running := cut.waitEvents(partition.EventRunning, 1, "the handler starts")[0]
	require.Equal(t, attempt.ID, running.Attempt)

	cut.cut()
	// The second worker runs from now on; it can lease the attempt only
	// once the cut-off worker's lease has expired.
	atSmoke, release, results := startTakeover(t, db, docs)

	ended := cut.waitEvents(partition.EventContextEnded, 1, "the handler's context ends at the lease's expiry, while the worker is cut off")[0]
	require.Contains(t, ended.Cause, repo.ErrLeaseLost.Error(), "the handler's context ended for another reason")
	// Not before the expiry (the database's clock and the worker's are the
	// host's; clockSlack absorbs a wall-clock step between the two reads).
	require.False(t, ended.At.Before(ended.ExpiresAt.Add(-clockSlack)), "the handler's context ended at %s, before its lease expired at %s", ended.At, ended.ExpiresAt)
	t.Logf("%s: lease expired at %s, handler's context ended %s later, without the database", cutID, ended.ExpiresAt.Format(time.RFC3339Nano), ended.At.Sub(ended.ExpiresAt))

	select {
	case <-atSmoke:
	case <-time.After(waitFor):
		require.FailNow(t, "the second worker did not lease the attempt and reach smoke_eval_passed", "within %s of the cut", waitFor)
	}

	// The route comes back while the second worker holds a valid lease at
	// smoke_eval_passed: only fencing stands between the late writes and
	// the attempt.
	before, after := cut.reconnect(newAddress)
	t.Logf("%s: back on the network, address %s (was %s)", cutID, after, before)
	cut.openGate()
	report := cut.waitEvents(partition.EventReport, 1, "the late writes, once the route is back")[0]
	evs := cut.events()
	var processed *partition.Event
	late := map[string]int{}
	for _, ev := range evs {
		switch ev.Event {
		case partition.EventProcessed:
			processed = &ev
		case partition.EventLateWrite:
			require.True(t, ev.Refused, "%s's late %s write under lease %s was not refused by fencing: err=%q", cutID, ev.Write, ev.Token, ev.Err)
			late[ev.Write]++
		}
	}
	require.NotNil(t, processed, "%s reported no processed delivery", cutID)
	require.Equal(t, string(worker.OutcomeLeaseLost), processed.Outcome, "the cut-off worker settled its delivery as %s: %s", processed.Outcome, processed.Err)
	wantProgress := 1
	if handler == "ignore" {
		wantProgress = 2 // the handler's own, through its Job, and the program's
	}
	require.Equal(t, map[string]int{partition.WriteHeartbeat: 1, partition.WriteProgress: wantProgress, partition.WriteOutcome: 1}, late,
		"late writes refused, by kind")
	require.Zero(t, report.Counts["late_heartbeat_accepted"]+report.Counts["late_progress_accepted"]+report.Counts["late_outcome_accepted"], "counts: %v", report.Counts)
	require.EqualValues(t, 1, report.Counts["worker_leases_lost"], "counts: %v", report.Counts)

	// With its route back the cut-off worker works again: it takes and
	// completes a new attempt (the second worker's one slot is busy),
	// so no connection of its pool is left hanging on the dead route.
	second := testfactory.StartAll(ctx, t, r, db.Pool, docs[1:], 10)[0]
	recovered := cut.waitEvents(partition.EventProcessed, 2, "the cut-off worker, its route back, completes a new attempt")[1]
	require.Equal(t, second.ID, recovered.Attempt)
	require.Equal(t, string(worker.OutcomeCompleted), recovered.Outcome, "the new attempt's outcome: %s", recovered.Err)

	close(release)
	var res worker.Result
	select {
	case res = <-results:
	case <-time.After(waitFor):
		require.FailNow(t, "the second worker did not record its outcome", "within %s", waitFor)
	}
	require.Equal(t, worker.OutcomeCompleted, res.Outcome, "the second worker's outcome: %v", res.Err)

	requireOneOutcome(ctx, t, db, attempt.ID, kfstype.RunStateSucceeded, takeoverID)
	requireOneOutcome(ctx, t, db, second.ID, kfstype.RunStateSucceeded, cutID)
	require.Equal(t, 3, testfactory.RequireNoLeaseOverlap(ctx, t, db.Pool), "leases granted: the cut-off worker's two and the second worker's")
	fw := testfactory.RequireFencedWrites(ctx, t, db.Pool)
	require.Equal(t, 2, fw.Outcomes, "outcomes written under a lease")
}

// startTakeover runs a worker in the test process, on pgsource, whose
// handler walks its attempt to smoke_eval_passed, closes atSmoke and
// returns once release is closed. results carries its deliveries'
// results.
func startTakeover(t *testing.T, db *pgtest.DB, docs []testfactory.Document) (atSmoke <-chan struct{}, release chan struct{}, results <-chan worker.Result) {
	t.Helper()
	smoke, rel := make(chan struct{}), make(chan struct{})
	cands := testfactory.Candidates(docs)
	h := worker.HandlerFunc(func(ctx context.Context, job *worker.Job) error {
		if err := testfactory.CompileJob(ctx, job, cands[job.Attempt.KnowledgeSpaceID], nil); err != nil {
			return err
		}
		close(smoke)
		<-rel
		return nil
	})
	src, err := pgsource.New(db.Pool, nil)
	require.NoError(t, err)
	w, err := worker.New(db.Pool, src, h, &worker.Config{ID: takeoverID, LeaseDuration: time.Minute, Concurrency: 1})
	require.NoError(t, err)
	w.TestSignals().Processed.Init()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case <-rel:
		default:
			close(rel)
		}
		<-done
	})
	return smoke, rel, w.TestSignals().Processed.C()
}

// requireOneOutcome requires that the attempt ended in state, once, by a
// write under the lease of worker by, and that its rows are consistent.
func requireOneOutcome(ctx context.Context, t *testing.T, db *pgtest.DB, id uuid.UUID, state kfstype.RunState, by string) {
	t.Helper()
	rows := testfactory.RequireInvariants(ctx, t, db.Pool, id)
	require.Equal(t, state, rows.Attempt.RunState)
	testfactory.RequireTerminalOnce(ctx, t, db.Pool, []uuid.UUID{id})
	var writers []string
	q, err := db.Pool.Query(ctx, `SELECT coalesce(old_worker, '') FROM test_lease_audit WHERE attempt_id = $1 AND new_state = $2 ORDER BY seq`, id, string(state))
	require.NoError(t, err)
	for q.Next() {
		var w string
		require.NoError(t, q.Scan(&w))
		writers = append(writers, w)
	}
	require.NoError(t, q.Err())
	require.Equal(t, []string{by}, writers, "the attempt's %s write, by the lease of", state)
}
