package multiproc_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/knowledgefs/kfsdb/kfstype"
	"github.com/knowledgefs/kfsdb/repo"
	"github.com/knowledgefs/kfsdb/tests/pgtest"
	"github.com/knowledgefs/kfsdb/tests/testfactory"
)

// Shape of the direct run: CI-sized unless KFS_SOAK=1. A quarter of the
// attempts start up front, the rest at a steady pace over the window.
func directShape() (attempts int, window time.Duration) {
	if soak() {
		return 1800, 40 * time.Second
	}
	return 240, 5 * time.Second
}

const (
	directTenants = 6 // SeedDocuments: one tenant per space
	// Short, so that the killed process's leases expire, and its attempts
	// are fetched again, well within the run.
	directLease     = 2 * time.Second
	directStepDelay = 20 * time.Millisecond
	// No injected failures: every attempt must succeed, exactly once. An
	// attempt runs once, or twice when its process is killed (or, on a
	// loaded machine, when a heartbeat comes too late); ten executions
	// leave room for that without one being exhausted.
	directMaxAttempts = 10
	// The victim is killed once it holds this many valid leases.
	directLeasesAtKill = 2
)

// victim is the process the test kills; its workers are victim-w0 and
// victim-w1.
const victim = "victim"

// orphan is an attempt the victim held a valid lease on when it died.
type orphan struct {
	attemptID uuid.UUID
	token     uuid.UUID
}

// TestThreeDirectProcessesOneKilled runs three `kfsdb-bench work --delivery
// postgres` processes on attempts of several tenants, started up front and
// during the run, and kills one of them with SIGKILL while it holds
// leases. The two others must finish everything: the victim's attempts
// once its leases expire.
func TestThreeDirectProcessesOneKilled(t *testing.T) {
	n, window := directShape()
	bin := buildKfsdbBench(t)
	ctx := context.Background()
	db := pgtest.NewDB(t)
	r := repo.New(nil)

	testfactory.InstallLeaseAudit(ctx, t, db.Pool)
	testfactory.InstallStateAudit(ctx, t, db.Pool)
	docs := testfactory.SeedDocuments(ctx, t, db.Pool, directTenants, n/directTenants)
	require.Len(t, docs, n)
	upfront := n / 4
	var idsMu sync.Mutex
	var ids []uuid.UUID
	for _, a := range testfactory.StartAll(ctx, t, r, db.Pool, docs[:upfront], directMaxAttempts) {
		ids = append(ids, a.ID)
	}

	start := time.Now()
	flags := &workFlags{delivery: "postgres", lease: directLease, stepDelay: directStepDelay}
	survivors := []*process{startWork(t, bin, db.URL, "survivor1", flags), startWork(t, bin, db.URL, "survivor2", flags)}
	// The victim's handler never finishes (its steps take an hour; its
	// heartbeats keep the leases): every lease it takes, it still holds
	// when it is killed, however slow or loaded the machine. (With the
	// survivors' 20 ms steps, a lease whose handler was finishing could be
	// completed by a statement already on the wire when the kill landed,
	// and the test had to catch a lease taken within the last 30 ms: a
	// race a loaded machine lost.)
	victimFlags := *flags
	victimFlags.stepDelay = time.Hour
	victimProc := startWork(t, bin, db.URL, victim, &victimFlags)

	// The producer: the other attempts, at a steady pace over the window.
	var producer sync.WaitGroup
	var startErrs []error
	producer.Go(func() {
		gap := window / time.Duration(n-upfront+1)
		for _, d := range docs[upfront:] {
			p := d.Scope.StartParams()
			p.MaxExecutionAttempts = directMaxAttempts
			res, err := r.Start(ctx, db.Pool, p)
			idsMu.Lock()
			if err == nil {
				ids = append(ids, res.Attempt.ID)
			} else {
				startErrs = append(startErrs, err)
			}
			idsMu.Unlock()
			time.Sleep(gap)
		}
	})

	// Kill the victim a third into the window, once it holds leases, with
	// attempts still to start after it.
	time.Sleep(window / 3)
	held := 0
	require.Eventually(t, func() bool {
		require.NoError(t, db.Pool.QueryRow(ctx, `SELECT count(*) FROM document_compilation_attempts
			WHERE worker_id LIKE $1 AND run_state = 'running' AND lease_expires_at > now()`, victim+"-%").Scan(&held))
		return held >= directLeasesAtKill
	}, 2*time.Minute, 2*time.Millisecond, "kfsdb-bench work %s never held %d leases:\n%s", victim, directLeasesAtKill, victimProc.out.String())
	victimProc.kill(t)
	killedAfter := time.Since(start)

	// What it held when its last session ended is orphaned: nobody hands
	// those leases back, they have to expire.
	waitSessionsEnded(ctx, t, db, victim)
	orphans := victimLeases(ctx, t, db)
	require.NotEmpty(t, orphans, "kfsdb-bench work %s held no lease when its sessions ended", victim)

	producer.Wait()
	require.NoError(t, errors.Join(startErrs...))
	require.Len(t, ids, n)
	waitNoneLive(ctx, t, db, 90*time.Second)
	duration := time.Since(start)
	for _, p := range survivors {
		p.stop(t)
	}

	// Every attempt succeeded, its outbox row completed, and succeeded
	// once: one transition into succeeded, and no other terminal one.
	pairs := requireEndPairs(ctx, t, db, n)
	require.Equal(t, map[string]int{"succeeded/completed": n}, pairs)
	for _, id := range ids {
		testfactory.RequireInvariants(ctx, t, db.Pool, id)
	}
	tc := testfactory.RequireTerminalOnce(ctx, t, db.Pool, ids)
	require.Equal(t, map[kfstype.RunState]int{kfstype.RunStateSucceeded: n}, tc.Outcomes)
	require.Zero(t, tc.Reactivations)
	var succeededTwice int
	require.NoError(t, db.Pool.QueryRow(ctx, `SELECT count(*) FROM (SELECT attempt_id FROM test_state_audit
		WHERE new_state = 'succeeded' GROUP BY 1 HAVING count(*) > 1) twice`).Scan(&succeededTwice))
	require.Zero(t, succeededTwice, "attempts that succeeded more than once")
	leases := testfactory.RequireNoLeaseOverlap(ctx, t, db.Pool)
	fw := testfactory.RequireFencedWrites(ctx, t, db.Pool)

	// Each orphan was fetched again by a survivor, only after the victim's
	// lease expired, and then completed: a second execution.
	for _, o := range orphans {
		var nextWorker *string
		var nextState string
		var at, expired time.Time
		require.NoError(t, db.Pool.QueryRow(ctx, `SELECT new_worker, new_state, changed_at, old_expires FROM test_lease_audit
			WHERE old_token = $1 AND new_token IS DISTINCT FROM old_token`, o.token).Scan(&nextWorker, &nextState, &at, &expired),
			"the victim's lease on attempt %s never ended", o.attemptID)
		require.Equal(t, string(kfstype.RunStateRunning), nextState, "attempt %s: the victim's lease was not ended by a fetch", o.attemptID)
		require.NotNil(t, nextWorker)
		require.True(t, strings.HasPrefix(*nextWorker, "survivor"), "attempt %s fetched again by %s", o.attemptID, *nextWorker)
		require.False(t, at.Before(expired), "attempt %s fetched again at %s, before the victim's lease expired at %s", o.attemptID, at, expired)
	}
	var orphansRerun, maxExecutions int
	require.NoError(t, db.Pool.QueryRow(ctx, `SELECT count(*) FILTER (WHERE id = ANY($1) AND run_state = 'succeeded' AND execution_attempts >= 2),
		max(execution_attempts) FROM document_compilation_attempts`, orphanIDs(orphans)).Scan(&orphansRerun, &maxExecutions))
	require.Equal(t, len(orphans), orphansRerun, "orphans completed by a second execution")

	// The processes' own count of completions adds up: the victim's (from
	// the audit: it printed nothing) and the survivors' make n.
	var victimLeased, victimCompleted int
	require.NoError(t, db.Pool.QueryRow(ctx, `SELECT count(*) FILTER (WHERE new_worker LIKE $1 AND new_token IS DISTINCT FROM old_token),
		count(*) FILTER (WHERE old_worker LIKE $1 AND old_state = 'running' AND new_state = 'succeeded') FROM test_lease_audit`, victim+"-%").Scan(&victimLeased, &victimCompleted))
	completed := int64(victimCompleted)
	var perProc []string
	for _, p := range survivors {
		c := p.counters()
		require.Positive(t, c["source_fetched_leases"], "kfsdb-bench work %s fetched no lease:\n%s", p.id, p.out.String())
		completed += c["worker_completed"]
		perProc = append(perProc, fmt.Sprintf("%s: fetched %d, leases %d, completed %d, lost %d, stale %d",
			p.id, c["source_fetched_leases"], c["worker_leases_acquired"], c["worker_completed"], c["worker_leases_lost"], c["worker_stale_deliveries"]))
	}
	require.Equal(t, int64(n), completed, "completions: the victim's %d and the survivors'", victimCompleted)

	requireNoDeadlocks(ctx, t, db, append(survivors, victimProc))

	t.Logf("FIGURES multiproc direct: %d attempts over %d tenants (%d up front, the rest over %s) in %s; 3 kfsdb-bench work --delivery postgres processes "+
		"(2 workers x 2 each, lease %s); %s took %d leases, killed (SIGKILL) at %s holding %d, %d orphaned, all fetched again by a survivor after expiry "+
		"and completed (max execution attempts %d); succeeded %d, each once; completions: %s %d + survivors %d; leases %d, 0 overlapping; "+
		"fenced writes %d+%d, 0 after expiry; deadlocks 0 (pg_stat_database), 0 in output; %s",
		n, directTenants, upfront, window, duration.Round(100*time.Millisecond), directLease, victim, victimLeased, killedAfter.Round(100*time.Millisecond), held,
		len(orphans), maxExecutions, tc.Outcomes[kfstype.RunStateSucceeded], victim, victimCompleted, completed-int64(victimCompleted),
		leases, fw.KeptToken, fw.Outcomes, strings.Join(perProc, "; "))
}

// victimLeases returns the attempts whose lease the victim's
// workers hold.
func victimLeases(ctx context.Context, t *testing.T, db *pgtest.DB) []orphan {
	t.Helper()
	// Expired or not: only a survivor's fetch (after the expiry) ends them.
	rows, err := db.Pool.Query(ctx, `SELECT id, lease_token FROM document_compilation_attempts
		WHERE worker_id LIKE $1 AND run_state = 'running'`, victim+"-%")
	require.NoError(t, err)
	defer rows.Close()
	var out []orphan
	for rows.Next() {
		var o orphan
		require.NoError(t, rows.Scan(&o.attemptID, &o.token))
		out = append(out, o)
	}
	require.NoError(t, rows.Err())
	return out
}

func orphanIDs(orphans []orphan) []uuid.UUID {
	ids := make([]uuid.UUID, len(orphans))
	for i, o := range orphans {
		ids[i] = o.attemptID
	}
	return ids
}
