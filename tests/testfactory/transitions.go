package testfactory

import (
	"context"
	"fmt"
	"log/slog"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/knowledgefs/kfsdb/kfstype"
	"github.com/knowledgefs/kfsdb/memqueue"
	"github.com/knowledgefs/kfsdb/relay"
	"github.com/knowledgefs/kfsdb/repo"
	"github.com/knowledgefs/kfsdb/worker"
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
	msgs, err := tr.repo.ClaimOutbox(bg, tr.env.App, &repo.ClaimParams{RelayID: "relay-transitions", BatchSize: 10})
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

// relayAndWorker: attempts go through relay.RunOnce and a worker over
// memqueue, both on the database clock (no override).
func (tr *transitions) relayAndWorker(t *testing.T) {
	const n = 3
	ctx, cancel := context.WithTimeout(bg, time.Minute)
	defer cancel()
	r := repo.New(nil)
	log := slog.New(slog.DiscardHandler)
	pubs := map[uuid.UUID][2]string{}
	var ids []uuid.UUID
	for range n {
		s := NewScope(ctx, t, tr.env.Owner, nil)
		id, fp := s.Publication(ctx, t, tr.env.Owner, "candidate")
		pubs[s.KnowledgeSpaceID] = [2]string{id.String(), fp}
		res, err := r.Start(ctx, tr.env.App, s.StartParams())
		tr.ok(t, "Start", err, res.Attempt.ID)
		ids = append(ids, res.Attempt.ID)
	}
	q := memqueue.New()
	rl, err := relay.New(tr.env.App, q, &relay.Config{Logger: log, PollOnly: true, Repo: r})
	require.NoError(t, err)
	handler := worker.HandlerFunc(func(ctx context.Context, job *worker.Job) error {
		for _, cp := range kfstype.Checkpoints()[job.Attempt.Checkpoint.Rank()+1:] {
			switch cp {
			case kfstype.CheckpointPublished:
				return nil
			case kfstype.CheckpointProjectionBuilt:
				p := pubs[job.Attempt.KnowledgeSpaceID]
				if err := job.BindCandidate(ctx, cp, uuid.MustParse(p[0]), p[1]); err != nil {
					return err
				}
			default:
				if err := job.Advance(ctx, cp); err != nil {
					return err
				}
			}
		}
		return nil
	})
	w, err := worker.New(tr.env.App, q, handler, &worker.Config{Logger: log, Repo: r})
	require.NoError(t, err)

	claimed, err := rl.RunOnce(ctx)
	tr.ok(t, "relay.RunOnce", err, uuid.Nil)
	require.Equal(t, n, claimed)
	for range n {
		msg, err := q.Receive(ctx)
		require.NoError(t, err)
		res := w.Process(ctx, msg)
		require.NoError(t, res.Err)
		require.Equal(t, worker.OutcomeCompleted, res.Outcome)
		tr.ok(t, "worker.Process", nil, res.AttemptID)
	}
	for _, id := range ids {
		rows := tr.requireState(t, id, kfstype.RunStateSucceeded)
		require.Equal(t, kfstype.CheckpointPublished, rows.Attempt.Checkpoint)
	}
}

func (tr *transitions) fullLifecycle(t *testing.T) {
	s := tr.scope(t)
	a := tr.start(t, s.StartParams())
	_, err := tr.repo.GetAttempt(bg, tr.env.App, s.TenantID, a.ID)
	tr.ok(t, "GetAttempt", err, uuid.Nil)
	lease := tr.acquire(t, tr.dispatch(t, a.ID))
	lease, err = tr.repo.Heartbeat(bg, tr.env.App, &repo.HeartbeatParams{Lease: lease})
	tr.ok(t, "Heartbeat", err, a.ID)
	tr.advanceTo(t, s, lease, kfstype.CheckpointSmokeEvalPassed)
	_, err = tr.repo.Complete(bg, tr.env.App, lease)
	tr.ok(t, "Complete", err, a.ID)
	tr.requireState(t, a.ID, kfstype.RunStateSucceeded)

	_, _, err = tr.repo.GetAttemptWithOutbox(bg, tr.env.App, s.TenantID, a.ID)
	tr.ok(t, "GetAttemptWithOutbox", err, uuid.Nil)
	list, err := tr.repo.ListDocumentVersionAttempts(bg, tr.env.App, &repo.DocumentVersion{
		TenantID: s.TenantID, KnowledgeSpaceID: s.KnowledgeSpaceID, DocumentAssetID: s.DocumentAssetID, DocumentVersion: s.DocumentVersion,
	})
	tr.ok(t, "ListDocumentVersionAttempts", err, uuid.Nil)
	require.Len(t, list, 1)
	_, err = tr.repo.CountLiveAttempts(bg, tr.env.App, s.TenantID)
	tr.ok(t, "CountLiveAttempts", err, uuid.Nil)
}

func (tr *transitions) deferredStart(t *testing.T) {
	s := tr.scope(t)
	p := s.StartParams()
	p.Deferred = true
	a := tr.start(t, p)
	ref := s.Ref(a.ID)
	_, err := tr.repo.ReleaseDeferred(bg, tr.env.App, &ref)
	tr.ok(t, "ReleaseDeferred", err, a.ID)
	_, err = tr.repo.Cancel(bg, tr.env.App, &repo.CancelParams{AttemptRef: ref})
	tr.ok(t, "Cancel", err, a.ID)
	tr.requireState(t, a.ID, kfstype.RunStateCanceled)
}

func (tr *transitions) cancelAndSupersede(t *testing.T) {
	s := tr.scope(t)
	a := tr.start(t, s.StartParams())
	ref := s.Ref(a.ID)
	stale := a.RowVersion + 1
	ref.ExpectedRowVersion = &stale
	_, err := tr.repo.Cancel(bg, tr.env.App, &repo.CancelParams{AttemptRef: ref})
	tr.refused(t, "Cancel", err, repo.ErrStaleRowVersion)
	ref.ExpectedRowVersion = &a.RowVersion
	reason := "user canceled"
	_, err = tr.repo.Cancel(bg, tr.env.App, &repo.CancelParams{AttemptRef: ref, Reason: &reason})
	tr.ok(t, "Cancel", err, a.ID)
	tr.requireState(t, a.ID, kfstype.RunStateCanceled)

	b := tr.start(t, s.StartParams())
	lease := tr.acquire(t, tr.dispatch(t, b.ID))
	reason = "newer document version"
	_, err = tr.repo.Supersede(bg, tr.env.App, &repo.SupersedeParams{AttemptRef: s.Ref(b.ID), Reason: &reason})
	tr.ok(t, "Supersede", err, b.ID)
	tr.requireState(t, b.ID, kfstype.RunStateSuperseded)
	_, err = tr.repo.Heartbeat(bg, tr.env.App, &repo.HeartbeatParams{Lease: lease})
	tr.refused(t, "Heartbeat", err, repo.ErrLeaseLost)
}

func (tr *transitions) failAndRetry(t *testing.T) {
	s := tr.scope(t)
	a := tr.start(t, s.StartParams())
	lease := tr.acquire(t, tr.dispatch(t, a.ID))
	_, err := tr.repo.Fail(bg, tr.env.App, &repo.FailParams{Lease: lease, ErrorCode: "DOCUMENT_COMPILATION_FAILED", ErrorMessage: "parser crashed"})
	tr.ok(t, "Fail", err, a.ID)
	tr.requireState(t, a.ID, kfstype.RunStateFailed)

	ref := s.Ref(a.ID)
	_, err = tr.repo.RetryFailed(bg, tr.env.App, &ref)
	tr.ok(t, "RetryFailed", err, a.ID)
	lease = tr.acquire(t, tr.dispatch(t, a.ID))
	_, err = tr.repo.ScheduleRetry(bg, tr.env.App, &repo.ScheduleRetryParams{
		Lease: lease, RetryDelay: 5 * time.Second, ErrorCode: "DOCUMENT_COMPILATION_RETRYABLE", ErrorMessage: "timeout",
	})
	tr.ok(t, "ScheduleRetry", err, a.ID)
	tr.requireState(t, a.ID, kfstype.RunStateRetryWait)

	tr.clock.Advance(6 * time.Second)
	lease = tr.acquire(t, tr.dispatch(t, a.ID))
	tr.advanceTo(t, s, lease, kfstype.CheckpointSmokeEvalPassed)
	_, err = tr.repo.Complete(bg, tr.env.App, lease)
	tr.ok(t, "Complete", err, a.ID)
	tr.requireState(t, a.ID, kfstype.RunStateSucceeded)
}

func (tr *transitions) exhausted(t *testing.T) {
	s := tr.scope(t)
	p := s.StartParams()
	p.MaxExecutionAttempts = 1
	a := tr.start(t, p)
	lease := tr.acquire(t, tr.dispatch(t, a.ID))
	tr.clock.Advance(repo.LeaseDurationDefault + time.Second) // the worker is lost
	_, err := tr.repo.Heartbeat(bg, tr.env.App, &repo.HeartbeatParams{Lease: lease})
	tr.refused(t, "Heartbeat", err, repo.ErrLeaseLost)
	d := tr.dispatch(t, a.ID) // the relay redelivers at the lease expiry
	_, _, err = tr.repo.AcquireLease(bg, tr.env.App, &repo.AcquireLeaseParams{Delivery: *d, WorkerID: "worker-2"})
	tr.refused(t, "AcquireLease", err, repo.ErrAttemptsExhausted)
	_, err = tr.repo.FailExhausted(bg, tr.env.App, d)
	tr.ok(t, "FailExhausted", err, a.ID)
	rows := tr.requireState(t, a.ID, kfstype.RunStateFailed)
	require.Equal(t, "EXECUTION_ATTEMPTS_EXHAUSTED", *rows.Attempt.LastErrorCode)
}

func (tr *transitions) backoffAndDeadLetter(t *testing.T) {
	s := tr.scope(t)
	a := tr.start(t, s.StartParams())
	for i, want := range []kfstype.OutboxStatus{kfstype.OutboxStatusPending, kfstype.OutboxStatusDead} {
		m := tr.claim(t, a.ID)
		o, err := tr.repo.ReleaseOutbox(bg, tr.env.App, &repo.ReleaseOutboxParams{
			OutboxID: m.ID, LockToken: *m.LockToken, Backoff: time.Second, MaxDispatchAttempts: 2,
			LastError: fmt.Sprintf("broker down (%d)", i+1),
		})
		tr.ok(t, "ReleaseOutbox", err, a.ID)
		require.Equal(t, want, o.Status)
		tr.clock.Advance(2 * time.Second)
	}
	rows := tr.requireState(t, a.ID, kfstype.RunStateFailed)
	require.Equal(t, "OUTBOX_DEAD", *rows.Attempt.LastErrorCode)
}

func (tr *transitions) headConflict(t *testing.T) {
	s := tr.scope(t)
	s.SetHead(bg, t, tr.env.Owner, 3)
	_, err := tr.repo.Start(bg, tr.env.App, s.StartParams())
	tr.refused(t, "Start", err, repo.ErrHeadConflict)
	p := s.StartParams()
	p.BaseHeadRevision = 3
	a := tr.start(t, p)
	_, err = tr.repo.Supersede(bg, tr.env.App, &repo.SupersedeParams{AttemptRef: s.Ref(a.ID)})
	tr.ok(t, "Supersede", err, a.ID)
}

func (tr *transitions) purge(t *testing.T) {
	require.NotEmpty(t, tr.tenant, "runs after the other scenarios")
	var before int
	require.NoError(t, tr.env.Owner.QueryRow(bg,
		`SELECT count(*) FROM document_compilation_attempts WHERE tenant_id = $1 AND active_slot IS NULL`, tr.tenant).Scan(&before))
	require.Positive(t, before)
	n, err := tr.repo.Purge(bg, tr.env.App, &repo.PurgeParams{TenantID: tr.tenant, CompletedBefore: tr.clock.Advance(time.Second)})
	tr.ok(t, "Purge", err, uuid.Nil)
	require.Equal(t, before, n)
	var outbox int
	require.NoError(t, tr.env.Owner.QueryRow(bg, `SELECT count(*) FROM document_compilation_outbox o
		JOIN document_compilation_attempts a ON a.id = o.attempt_id WHERE a.tenant_id = $1`, tr.tenant).Scan(&outbox))
	require.Zero(t, outbox)
}
