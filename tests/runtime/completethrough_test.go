package runtime_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/knowledgefs/kfsdb/kfstype"
	"github.com/knowledgefs/kfsdb/relay"
	"github.com/knowledgefs/kfsdb/repo"
	"github.com/knowledgefs/kfsdb/tests/testfactory"
	"github.com/knowledgefs/kfsdb/worker"
)

// queryLog is a pgx QueryTracer keeping the sqlc name ("-- name: X") of
// every statement sent, in order ("?" for unnamed SQL).
type queryLog struct {
	mu    sync.Mutex
	names []string
}

func (l *queryLog) TraceQueryStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceQueryStartData) context.Context {
	name := statementName(d.SQL)
	l.mu.Lock()
	l.names = append(l.names, name)
	l.mu.Unlock()
	return ctx
}

// statementName is the sqlc name a statement's text starts with ("?" for
// none).
func statementName(sql string) string {
	if rest, ok := strings.CutPrefix(sql, "-- name: "); ok {
		name, _, _ := strings.Cut(rest, " ")
		return name
	}
	return "?"
}

func (l *queryLog) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

func (l *queryLog) sent() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), l.names...)
}

// tracedWorker returns a worker on a pool of its own whose statements log
// records.
func (b *workerBundle) tracedWorker(t *testing.T, log *queryLog, h worker.HandlerFunc, cfg worker.Config) *worker.Worker {
	t.Helper()
	return newWorker(t, b.tracedPool(t, log), b.q, h, cfg)
}

// ctLease is the lease the CompleteThrough tests take: long enough that no
// heartbeat (every third of it) writes while the handler runs.
const ctLease = 5 * time.Minute

// wantAfterRun is before (a queued attempt, its outbox row dispatched)
// after one run of one execution attempt that ended it in state with its
// outbox row in status at checkpoint cp, in the two writes AcquireLease
// and the outcome. The timestamps come from the database's clock, so they
// are taken from after and checked against each other: AcquireLease set
// started_at and the outbox row's available_at (started_at + lease), the
// outcome completed_at and both rows' updated_at.
func wantAfterRun(t *testing.T, before, after *testfactory.Rows, state kfstype.RunState, status kfstype.OutboxStatus, cp kfstype.Checkpoint) *testfactory.Rows {
	t.Helper()
	require.NotNil(t, after.Attempt.StartedAt)
	require.NotNil(t, after.Attempt.CompletedAt)
	started, completed := *after.Attempt.StartedAt, *after.Attempt.CompletedAt
	require.False(t, started.Before(before.Attempt.UpdatedAt), "started_at %s before the dispatch at %s", started, before.Attempt.UpdatedAt)
	require.False(t, completed.Before(started), "completed_at %s before started_at %s", completed, started)
	require.Equal(t, started.Add(ctLease), after.Outbox.AvailableAt, "the lease's outbox due time")

	want := *before
	a := &want.Attempt
	a.RunState = state
	a.Checkpoint = cp
	a.Active = false
	a.ExecutionAttempts = 1
	a.StartedAt, a.CompletedAt = &started, &completed
	a.WorkerID, a.LeaseToken, a.LeaseExpiresAt, a.HeartbeatAt, a.RetryAt = nil, nil, nil, nil, nil
	a.RowVersion += 2
	a.UpdatedAt = completed
	o := &want.Outbox
	o.Status = status
	o.AvailableAt = started.Add(ctLease)
	o.LockedBy, o.LockToken, o.LockedUntil = nil, nil, nil
	o.UpdatedAt = completed
	return &want
}

// TestWorkerCompleteThrough runs handlers that finish with
// job.CompleteThrough: the worker completes from any checkpoint in one
// write, or fails the attempt with DOCUMENT_COMPILATION_FAILED when the
// candidate is refused.
func TestWorkerCompleteThrough(t *testing.T) {
	t.Parallel()

	t.Run("CompletesFromQueuedInOneWrite", func(t *testing.T) {
		t.Parallel()
		b := setupWorker(t)
		c := b.doc.Candidate
		log := &queryLog{}
		w := b.tracedWorker(t, log, func(ctx context.Context, job *worker.Job) error {
			job.CompleteThrough(c.ID, c.Fingerprint)
			return nil
		}, worker.Config{ID: "worker-ct", LeaseDuration: ctLease})
		a := b.start(t, 0)
		b.publish(t, 1)
		before := b.rows(t, a.ID)
		require.Equal(t, kfstype.RunStateQueued, before.Attempt.RunState)

		res := w.Process(b.ctx, b.receive(t))
		require.Equal(t, worker.OutcomeCompleted, res.Outcome, "%v", res.Err)
		require.NoError(t, res.Err)
		require.Equal(t, []string{"AcquireLease", "CompleteThrough"}, log.sent(), "the worker's statements")

		after := b.rows(t, a.ID)
		want := wantAfterRun(t, before, after, kfstype.RunStateSucceeded, kfstype.OutboxStatusCompleted, kfstype.CheckpointPublished)
		want.Attempt.CandidatePublicationID, want.Attempt.CandidateFingerprint = &c.ID, &c.Fingerprint
		require.Equal(t, want, after)
		_, acked, retried := b.q.Stats()
		require.EqualValues(t, 1, acked)
		require.Zero(t, retried)
	})

	t.Run("CompletesAfterAdvanceTo", func(t *testing.T) {
		t.Parallel()
		b := setupWorker(t)
		c := b.doc.Candidate
		log := &queryLog{}
		var seen kfstype.Checkpoint
		w := b.tracedWorker(t, log, func(ctx context.Context, job *worker.Job) error {
			if err := job.AdvanceTo(ctx, kfstype.CheckpointNodesGenerated); err != nil {
				return err
			}
			seen = job.Attempt.Checkpoint
			job.CompleteThrough(c.ID, c.Fingerprint)
			return nil
		}, worker.Config{ID: "worker-ct", LeaseDuration: ctLease})
		a := b.start(t, 0)
		b.publish(t, 1)
		before := b.rows(t, a.ID)

		res := w.Process(b.ctx, b.receive(t))
		require.Equal(t, worker.OutcomeCompleted, res.Outcome, "%v", res.Err)
		require.Equal(t, kfstype.CheckpointNodesGenerated, seen, "job.Attempt follows AdvanceTo")
		require.Equal(t, []string{"AcquireLease", "Advance", "CompleteThrough"}, log.sent(), "the worker's statements")

		after := b.rows(t, a.ID)
		want := wantAfterRun(t, before, after, kfstype.RunStateSucceeded, kfstype.OutboxStatusCompleted, kfstype.CheckpointPublished)
		want.Attempt.CandidatePublicationID, want.Attempt.CandidateFingerprint = &c.ID, &c.Fingerprint
		want.Attempt.RowVersion++ // AdvanceTo
		require.Equal(t, want, after)
	})

	t.Run("KeepsCandidateBoundOnTheWay", func(t *testing.T) {
		t.Parallel()
		b := setupWorker(t)
		c := b.doc.Candidate
		log := &queryLog{}
		w := b.tracedWorker(t, log, func(ctx context.Context, job *worker.Job) error {
			if err := job.BindCandidate(ctx, kfstype.CheckpointParsed, c.ID, c.Fingerprint); err != nil {
				return err
			}
			job.CompleteThrough(c.ID, c.Fingerprint) // the same one again
			return nil
		}, worker.Config{ID: "worker-ct", LeaseDuration: ctLease})
		a := b.start(t, 0)
		b.publish(t, 1)
		before := b.rows(t, a.ID)

		res := w.Process(b.ctx, b.receive(t))
		require.Equal(t, worker.OutcomeCompleted, res.Outcome, "%v", res.Err)
		require.Equal(t, []string{"AcquireLease", "Advance", "CompleteThrough"}, log.sent(), "the worker's statements")
		after := b.rows(t, a.ID)
		want := wantAfterRun(t, before, after, kfstype.RunStateSucceeded, kfstype.OutboxStatusCompleted, kfstype.CheckpointPublished)
		want.Attempt.CandidatePublicationID, want.Attempt.CandidateFingerprint = &c.ID, &c.Fingerprint
		want.Attempt.RowVersion++ // Advance
		require.Equal(t, want, after)
	})

	// A malformed candidate is refused before any round trip, and fails
	// the attempt at once: running the handler again would end the same
	// way.
	t.Run("MalformedCandidateFailsAtOnce", func(t *testing.T) {
		t.Parallel()
		b := setupWorker(t)
		log := &queryLog{}
		w := b.tracedWorker(t, log, func(ctx context.Context, job *worker.Job) error {
			job.CompleteThrough(b.doc.Candidate.ID, "bad")
			return nil
		}, worker.Config{ID: "worker-ct", LeaseDuration: ctLease})
		a := b.start(t, 0)
		b.publish(t, 1)

		res := w.Process(b.ctx, b.receive(t))
		require.Equal(t, worker.OutcomeFailed, res.Outcome, "%v", res.Err)
		require.ErrorIs(t, res.Err, repo.ErrInvalidInput)
		require.Equal(t, []string{"AcquireLease", "Fail"}, log.sent(), "the worker's statements")
		after := b.rows(t, a.ID)
		require.Equal(t, kfstype.RunStateFailed, after.Attempt.RunState)
		require.Equal(t, kfstype.ErrorCodeCompilationFailed, *after.Attempt.LastErrorCode)
		_, acked, retried := b.q.Stats()
		require.EqualValues(t, 1, acked)
		require.Zero(t, retried)
	})

	// A refused candidate fails the attempt like a handler that stopped
	// short: the refused CompleteThrough (and the read that explains it)
	// write nothing, the attempt keeps its checkpoint and binds nothing,
	// then Fail ends it.
	for _, tc := range []struct {
		name string
		cand func(t *testing.T, b *workerBundle) testfactory.Candidate
	}{
		{"BogusCandidateFails", func(t *testing.T, b *workerBundle) testfactory.Candidate {
			return testfactory.Candidate{ID: uuid.New(), Fingerprint: testfactory.Fingerprint("bogus")}
		}},
		{"CandidateOfAnotherSpaceFails", func(t *testing.T, b *workerBundle) testfactory.Candidate {
			return testfactory.SeedDocuments(b.ctx, t, b.pool, 1, 1)[0].Candidate
		}},
		{"ValidatingPublicationFails", func(t *testing.T, b *workerBundle) testfactory.Candidate {
			id, fp := b.doc.Scope.Publication(b.ctx, t, b.pool, "validating")
			return testfactory.Candidate{ID: id, Fingerprint: fp}
		}},
		{"RightIDWithAnotherFingerprintFails", func(t *testing.T, b *workerBundle) testfactory.Candidate {
			return testfactory.Candidate{ID: b.doc.Candidate.ID, Fingerprint: testfactory.Fingerprint("another")}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			b := setupWorker(t)
			c := tc.cand(t, b)
			log := &queryLog{}
			w := b.tracedWorker(t, log, func(ctx context.Context, job *worker.Job) error {
				job.CompleteThrough(c.ID, c.Fingerprint)
				return nil
			}, worker.Config{ID: "worker-ct", LeaseDuration: ctLease})
			a := b.start(t, 0)
			b.publish(t, 1)
			before := b.rows(t, a.ID)

			res := w.Process(b.ctx, b.receive(t))
			require.Equal(t, worker.OutcomeFailed, res.Outcome, "%v", res.Err)
			require.ErrorIs(t, res.Err, repo.ErrCandidateRejected)
			var werr *worker.Error
			require.ErrorAs(t, res.Err, &werr)
			require.Equal(t, kfstype.ErrorCodeCompilationFailed, werr.Code)
			require.Equal(t, []string{"AcquireLease", "CompleteThrough", "GetAttemptWithOutbox", "Fail"}, log.sent(), "the worker's statements")

			after := b.rows(t, a.ID)
			want := wantAfterRun(t, before, after, kfstype.RunStateFailed, kfstype.OutboxStatusDead, kfstype.CheckpointQueued)
			want.Attempt.LastErrorCode = &werr.Code
			require.NotNil(t, after.Attempt.LastErrorMessage)
			require.Contains(t, *after.Attempt.LastErrorMessage, repo.ErrCandidateRejected.Error())
			require.Equal(t, werr.Err.Error(), *after.Attempt.LastErrorMessage, "the cause, its code stored apart")
			want.Attempt.LastErrorMessage = after.Attempt.LastErrorMessage
			require.Equal(t, want, after, "failed at queued, no candidate bound")
			_, acked, retried := b.q.Stats()
			require.EqualValues(t, 1, acked)
			require.Zero(t, retried)
		})
	}
}

// TestRunCompleteThrough runs a relay and a worker (RunAll) over many
// attempts whose handler only calls job.CompleteThrough: each attempt is
// written twice under its lease, by AcquireLease and by CompleteThrough,
// and the lease audit counts every CompleteThrough as a fenced outcome.
func TestRunCompleteThrough(t *testing.T) {
	t.Parallel()
	const n = 40
	e := newEnv(t, 16)
	ctx, pool := e.ctx, e.pool
	testfactory.InstallLeaseAudit(ctx, t, pool)
	docs, attempts := e.start(t, 4, n/4, 0)
	cands := testfactory.Candidates(docs)
	ids := attemptIDs(attempts)

	h := worker.HandlerFunc(func(ctx context.Context, job *worker.Job) error {
		c := cands[job.Attempt.KnowledgeSpaceID]
		job.CompleteThrough(c.ID, c.Fingerprint)
		return nil
	})
	rl := e.relay(t, relay.Config{PollInterval: 50 * time.Millisecond})
	w := e.worker(t, h, worker.Config{Concurrency: 4, LeaseDuration: ctLease})
	stop := testfactory.RunAll(ctx, t, rl.Run, w.Run)
	require.Eventually(t, func() bool { return liveCount(ctx, t, pool, ids) == 0 }, 60*time.Second, 20*time.Millisecond, "attempts still live")
	stop()

	for i, a := range attempts {
		rows := testfactory.RequireInvariants(ctx, t, pool, a.ID)
		require.Equal(t, kfstype.RunStateSucceeded, rows.Attempt.RunState, "attempt %s", a.ID)
		require.Equal(t, kfstype.CheckpointPublished, rows.Attempt.Checkpoint)
		require.Equal(t, kfstype.OutboxStatusCompleted, rows.Outbox.Status)
		require.Equal(t, docs[i].Candidate.ID, *rows.Attempt.CandidatePublicationID)
		require.Equal(t, docs[i].Candidate.Fingerprint, *rows.Attempt.CandidateFingerprint)
		require.EqualValues(t, 1, rows.Attempt.ExecutionAttempts)
		// Start, MarkDispatched, AcquireLease, CompleteThrough.
		require.Equal(t, a.RowVersion+3, rows.Attempt.RowVersion, "attempt %s row_version", a.ID)
	}
	fw := testfactory.RequireFencedWrites(ctx, t, pool)
	require.Equal(t, testfactory.FencedWrites{KeptToken: 0, Outcomes: n}, fw, "one fenced write per attempt: CompleteThrough")
	require.Equal(t, n, testfactory.RequireNoLeaseOverlap(ctx, t, pool))
	requireQuiescent(ctx, t, pool)
}
