package testfactory

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"sync"
	"testing"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/knowledgefs/kfsdb/kfstype"
	"github.com/knowledgefs/kfsdb/repo"
)

// TransitionEnv is where RunTransitions runs: App carries every transition,
// the relay and the worker (the role or connection path under test);
// Owner inserts the fixtures the application never writes (spaces, assets,
// publications, heads) and reads rows back for the invariant checks.
type TransitionEnv struct {
	App   *pgxpool.Pool
	Owner DBTX
}

// TransitionCounts counts the repo calls RunTransitions made, by name;
// refused calls that are part of a scenario count as "<name> (refused)".
type TransitionCounts struct {
	mu sync.Mutex
	m  map[string]int
}

// Total is the number of calls counted.
func (c *TransitionCounts) Total() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for _, v := range c.m {
		n += v
	}
	return n
}

// String lists the counts, sorted by name.
func (c *TransitionCounts) String() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	names := make([]string, 0, len(c.m))
	for k := range c.m {
		names = append(names, k)
	}
	sort.Strings(names)
	parts := make([]string, len(names))
	for i, k := range names {
		parts[i] = fmt.Sprintf("%s=%d", k, c.m[k])
	}
	return strings.Join(parts, " ")
}

func (c *TransitionCounts) add(name string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.m[name]++
}

// RunTransitions runs a representative set of transitions on env.App, as
// subtests run one after another on one database: the relay and a worker
// over memqueue completing attempts, the full lifecycle with every read,
// deferred start, cancel and supersede, fail and manual retry, scheduled
// retry, exhausted attempts, outbox backoff and dead-letter, a head
// conflict, and purge. Every call must succeed (or be refused exactly as
// the scenario expects) and every row must satisfy the invariants. Each
// scenario leaves its attempts terminal, so scenarios never claim each
// other's rows.
func RunTransitions(t *testing.T, env *TransitionEnv) *TransitionCounts {
	t.Helper()
	tr := &transitions{env: env, counts: &TransitionCounts{m: map[string]int{}}, clock: NewClock()}
	tr.repo = repo.New(&repo.Config{Clock: tr.clock})
	t.Run("RelayAndWorker", tr.relayAndWorker)
	t.Run("FullLifecycle", tr.fullLifecycle)
	t.Run("DeferredStart", tr.deferredStart)
	t.Run("CancelAndSupersede", tr.cancelAndSupersede)
	t.Run("FailRetryFailedScheduleRetry", tr.failAndRetry)
	t.Run("AttemptsExhausted", tr.exhausted)
	t.Run("OutboxBackoffAndDeadLetter", tr.backoffAndDeadLetter)
	t.Run("HeadConflict", tr.headConflict)
	t.Run("Purge", tr.purge)
	return tr.counts
}

type transitions struct {
	env    *TransitionEnv
	counts *TransitionCounts
	clock  *Clock
	repo   *repo.Repo
	// tenant is shared by the clock-driven scenarios, so Purge finds their
	// terminal attempts.
	tenant string
}

var bg = context.Background()

// ok requires err is nil, counts the call and checks the invariants of
// the attempt (when given).
func (tr *transitions) ok(t *testing.T, name string, err error, attemptID uuid.UUID) {
	t.Helper()
	require.NoError(t, err, name)
	tr.counts.add(name)
	if attemptID != uuid.Nil {
		RequireInvariants(bg, t, tr.env.Owner, attemptID)
	}
}

// refused requires err matches target and counts the refusal.
func (tr *transitions) refused(t *testing.T, name string, err, target error) {
	t.Helper()
	require.ErrorIs(t, err, target, name)
	tr.counts.add(name + " (refused)")
}

func (tr *transitions) scope(t *testing.T) *Scope {
	t.Helper()
	if tr.tenant == "" {
		tr.tenant = "tenant-" + uuid.NewString()[:8]
	}
	return NewScope(bg, t, tr.env.Owner, &ScopeOpts{TenantID: &tr.tenant})
}

func (tr *transitions) start(t *testing.T, p *repo.StartParams) *kfstype.Attempt {
	t.Helper()
	res, err := tr.repo.Start(bg, tr.env.App, p)
	require.NoError(t, err)
	require.True(t, res.Created)
	tr.ok(t, "Start", nil, res.Attempt.ID)
	return res.Attempt
}

// claim claims due rows and returns the attempt's; the scenarios keep
// every other row terminal, so nothing else is claimed.
func (tr *transitions) claim(t *testing.T, attemptID uuid.UUID) *kfstype.OutboxMessage {
	t.Helper()
	msgs, err := tr.repo.ClaimOutbox(bg, tr.env.App, &repo.ClaimOutboxParams{RelayID: "relay-transitions", BatchSize: 10})
	tr.ok(t, "ClaimOutbox", err, attemptID)
	require.Len(t, msgs, 1, "only the scenario's row is due")
	require.Equal(t, attemptID, msgs[0].AttemptID)
	return msgs[0]
}

func (tr *transitions) dispatch(t *testing.T, attemptID uuid.UUID) *repo.Delivery {
	t.Helper()
	m := tr.claim(t, attemptID)
	job := "job-" + uuid.NewString()
	ext := "ext-" + job
	res, err := tr.repo.MarkDispatched(bg, tr.env.App, &repo.MarkDispatchedParams{Dispatches: []repo.Dispatch{{
		OutboxID: m.ID, LockToken: *m.LockToken, QueueJobID: job, ExternalJobID: &ext,
	}}})
	tr.ok(t, "MarkDispatched", err, attemptID)
	require.Len(t, res.Marked, 1)
	return &repo.Delivery{AttemptID: attemptID, QueueJobID: job, ExternalJobID: &ext}
}

func (tr *transitions) acquire(t *testing.T, d *repo.Delivery) *repo.Lease {
	t.Helper()
	_, lease, err := tr.repo.AcquireLease(bg, tr.env.App, &repo.AcquireLeaseParams{Delivery: *d, WorkerID: "worker-transitions"})
	tr.ok(t, "AcquireLease", err, d.AttemptID)
	return lease
}

// advanceTo advances checkpoint by checkpoint, binding a candidate the
// owner inserted at projection_built.
func (tr *transitions) advanceTo(t *testing.T, s *Scope, lease *repo.Lease, target kfstype.Checkpoint) {
	t.Helper()
	cps := kfstype.Checkpoints()
	for i := 1; i <= target.Rank(); i++ {
		p := &repo.AdvanceParams{Lease: lease, Checkpoint: cps[i]}
		if cps[i] == kfstype.CheckpointProjectionBuilt {
			id, fp := s.Publication(bg, t, tr.env.Owner, "candidate")
			p.CandidatePublicationID, p.CandidateFingerprint = &id, &fp
		}
		_, err := tr.repo.Advance(bg, tr.env.App, p)
		tr.ok(t, "Advance", err, lease.AttemptID)
	}
}

func (tr *transitions) requireState(t *testing.T, id uuid.UUID, want kfstype.RunState) *Rows {
	t.Helper()
	rows := RequireInvariants(bg, t, tr.env.Owner, id)
	require.Equal(t, want, rows.Attempt.RunState)
	return rows
}
