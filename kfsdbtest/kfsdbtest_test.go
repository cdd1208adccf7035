package kfsdbtest_test

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/knowledgefs/kfsdb/kfsdbtest"
	"github.com/knowledgefs/kfsdb/kfstype"
	"github.com/knowledgefs/kfsdb/repo"
	"github.com/knowledgefs/kfsdb/worker"
)

// The tests below use the kit the way an application team would: one
// database per test, the platform's rows from the fixtures, the team's
// handler run by Work, the outcome checked with RequireAttempt and
// RequireOutbox.

func TestMain(m *testing.M) { kfsdbtest.Main(m) }

// compile is an application's handler: it walks the checkpoints, binding
// the document's candidate publication at projection_built; the worker
// completes the attempt once it returns nil.
func compile(candidate kfsdbtest.Publication) worker.Handler {
	return worker.HandlerFunc(func(ctx context.Context, job *worker.Job) error {
		for _, cp := range kfstype.Checkpoints()[job.Attempt.Checkpoint.Rank()+1 : kfstype.CheckpointPublished.Rank()] {
			var err error
			if cp == kfstype.CheckpointProjectionBuilt {
				err = job.BindCandidate(ctx, cp, candidate.ID, candidate.Fingerprint)
			} else {
				err = job.Advance(ctx, cp)
			}
			if err != nil {
				return err
			}
		}
		return nil
	})
}

func TestWorkCompletesThroughTheHandler(t *testing.T) {
	t.Parallel()
	db := kfsdbtest.NewDB(t)
	doc := db.Document(t, "acme")
	a := db.Start(t, db.StartParams(t, doc.Asset))
	db.RequireAttempt(t, a.ID, kfsdbtest.AttemptWant{RunState: kfstype.RunStateDispatchPending, Checkpoint: kfstype.CheckpointQueued})
	db.RequireOutbox(t, a.ID, kfsdbtest.OutboxWant{Status: kfstype.OutboxStatusPending})

	res := db.Work(t, compile(doc.Candidate), nil)
	require.Equal(t, worker.OutcomeCompleted, res.Outcome, "%v", res.Err)
	require.Equal(t, a.ID, res.AttemptID)
	db.RequireAttempt(t, a.ID, kfsdbtest.AttemptWant{
		RunState: kfstype.RunStateSucceeded, Checkpoint: kfstype.CheckpointPublished,
		ExecutionAttempts: 1, Candidate: doc.Candidate.ID,
	})
	db.RequireOutbox(t, a.ID, kfsdbtest.OutboxWant{Status: kfstype.OutboxStatusCompleted, DispatchAttempts: 1})

	_, err := kfsdbtest.WorkNext(context.Background(), db.Pool, compile(doc.Candidate), nil)
	require.ErrorIs(t, err, kfsdbtest.ErrNothingDue)
}

// TestWorkRecordsHandlerErrorsAsTheWorkerDoes: Work records what the
// worker's own judge decides, not a copy of its rules.
func TestWorkRecordsHandlerErrorsAsTheWorkerDoes(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		err   error
		panic bool
		cfg   *worker.Config
		out   worker.Outcome
		state kfstype.RunState
		code  string
	}{
		{name: "PlainErrorFails", err: errors.New("parser crashed"),
			out: worker.OutcomeFailed, state: kfstype.RunStateFailed, code: kfstype.ErrorCodeCompilationFailed},
		{name: "PlainErrorRetriedWithRetryPlainErrors", err: errors.New("parser crashed"), cfg: &worker.Config{RetryPlainErrors: true},
			out: worker.OutcomeRetried, state: kfstype.RunStateRetryWait, code: kfstype.ErrorCodeCompilationRetryable},
		{name: "RetryableRetried", err: worker.Retryable(errors.New("object store timed out")),
			out: worker.OutcomeRetried, state: kfstype.RunStateRetryWait, code: kfstype.ErrorCodeCompilationRetryable},
		{name: "FatalFailsWithItsCode", err: worker.Fatal("PDF_ENCRYPTED", errors.New("cannot decrypt")),
			out: worker.OutcomeFailed, state: kfstype.RunStateFailed, code: "PDF_ENCRYPTED"},
		{name: "PanicFails", panic: true,
			out: worker.OutcomeFailed, state: kfstype.RunStateFailed, code: kfstype.ErrorCodeHandlerPanic},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			db := kfsdbtest.NewDB(t)
			a := db.Start(t, db.StartParams(t, db.Document(t, "").Asset))
			res := db.Work(t, worker.HandlerFunc(func(context.Context, *worker.Job) error {
				if tc.panic {
					panic("nil map")
				}
				return tc.err
			}), tc.cfg)
			require.Equal(t, tc.out, res.Outcome)
			db.RequireAttempt(t, a.ID, kfsdbtest.AttemptWant{RunState: tc.state, ErrorCode: tc.code, ExecutionAttempts: 1})
		})
	}
}

// clock is a repo.Clock an hour ahead of the wall clock: a retry
// scheduled now is due for it.
type clock struct{ ahead time.Duration }

func (c clock) NowOrNil() *time.Time {
	t := time.Now().Add(c.ahead)
	return &t
}

// TestWorkRunsARetryOnceDue: a retry is not due at once; with a repo whose
// clock is past retry_at it runs again, and when the budget is spent the
// attempt fails exhausted.
func TestWorkRunsARetryOnceDue(t *testing.T) {
	t.Parallel()
	db := kfsdbtest.NewDB(t)
	doc := db.Document(t, "")
	p := db.StartParams(t, doc.Asset)
	p.MaxExecutionAttempts = 2
	a := db.Start(t, p)
	flaky := worker.HandlerFunc(func(context.Context, *worker.Job) error { return worker.Retryable(errors.New("busy")) })

	require.Equal(t, worker.OutcomeRetried, db.Work(t, flaky, nil).Outcome)
	_, err := kfsdbtest.WorkNext(context.Background(), db.Pool, flaky, nil)
	require.ErrorIs(t, err, kfsdbtest.ErrNothingDue, "the retry waits for its backoff")

	later := &worker.Config{Repo: repo.New(&repo.Config{Clock: clock{ahead: time.Hour}})}
	res := db.Work(t, flaky, later)
	require.Equal(t, worker.OutcomeExhausted, res.Outcome, "the second and last execution attempt")
	db.RequireAttempt(t, a.ID, kfsdbtest.AttemptWant{
		RunState: kfstype.RunStateFailed, ErrorCode: kfstype.ErrorCodeExecutionAttemptsExhausted, ExecutionAttempts: 2,
	})
	db.RequireOutbox(t, a.ID, kfsdbtest.OutboxWant{Status: kfstype.OutboxStatusDead})
}

// TestPromoteBumpsTheHead: after Complete the platform promotes the
// candidate and bumps the head; the next Start needs the new revision,
// which StartParams reads with repo.HeadRevision.
func TestPromoteBumpsTheHead(t *testing.T) {
	t.Parallel()
	db := kfsdbtest.NewDB(t)
	doc := db.Document(t, "acme")
	first := db.StartParams(t, doc.Asset)
	require.Zero(t, first.BaseHeadRevision, "a space without a head is at revision 0")
	a := db.Start(t, first)
	require.Equal(t, worker.OutcomeCompleted, db.Work(t, compile(doc.Candidate), nil).Outcome)
	require.EqualValues(t, 1, db.Promote(t, doc.Space, doc.Candidate))

	v2 := db.Asset(t, doc.Space, 2)
	stale := db.StartParams(t, v2)
	require.EqualValues(t, 1, stale.BaseHeadRevision)
	// Another compilation is promoted meanwhile: stale is now one behind.
	require.EqualValues(t, 2, db.Promote(t, doc.Space, db.Candidate(t, doc.Space)))
	_, err := db.Repo.Start(context.Background(), db.Pool, stale)
	var conflict *repo.HeadConflictError
	require.ErrorAs(t, err, &conflict)
	require.EqualValues(t, 2, conflict.Actual)
	db.Start(t, db.StartParams(t, v2))
	db.RequireAttempt(t, a.ID, kfsdbtest.AttemptWant{RunState: kfstype.RunStateSucceeded})
}

// TestDatabasesAreIsolated: each test's database is its own copy of the
// migrated template.
func TestDatabasesAreIsolated(t *testing.T) {
	t.Parallel()
	one, two := kfsdbtest.NewDB(t), kfsdbtest.NewDB(t)
	require.NotEqual(t, one.Name, two.Name)
	one.Start(t, one.StartParams(t, one.Document(t, "acme").Asset))
	var n int
	require.NoError(t, two.Pool.QueryRow(context.Background(), `SELECT count(*) FROM document_compilation_attempts`).Scan(&n))
	require.Zero(t, n)

	empty := kfsdbtest.NewEmptyDB(t)
	require.NoError(t, empty.Pool.QueryRow(context.Background(),
		`SELECT count(*) FROM pg_tables WHERE schemaname = 'public'`).Scan(&n))
	require.Zero(t, n, "NewEmptyDB has no tables")
}

// recorder is a testing.TB whose Fatal records the message and ends the
// goroutine, so a test can see an assertion fail.
type recorder struct {
	testing.TB
	msg string
}

func (r *recorder) Helper() {}
func (r *recorder) Fatal(args ...any) {
	r.msg = fmt.Sprint(args...)
	runtime.Goexit()
}
func (r *recorder) Fatalf(format string, args ...any) { r.Fatal(fmt.Sprintf(format, args...)) }

// failure runs assert with a recorder and returns what it failed with ("").
func failure(t *testing.T, assert func(testing.TB)) string {
	r := &recorder{TB: t}
	done := make(chan struct{})
	go func() {
		defer close(done)
		assert(r)
	}()
	<-done
	return r.msg
}

func TestRequireNamesEveryMismatch(t *testing.T) {
	t.Parallel()
	db := kfsdbtest.NewDB(t)
	a := db.Start(t, db.StartParams(t, db.Document(t, "").Asset))
	require.Empty(t, failure(t, func(tb testing.TB) {
		db.RequireAttempt(tb, a.ID, kfsdbtest.AttemptWant{RunState: kfstype.RunStateDispatchPending})
	}))
	msg := failure(t, func(tb testing.TB) {
		db.RequireAttempt(tb, a.ID, kfsdbtest.AttemptWant{RunState: kfstype.RunStateSucceeded, Checkpoint: kfstype.CheckpointPublished})
	})
	require.Contains(t, msg, "run_state is dispatch_pending, want succeeded")
	require.Contains(t, msg, "checkpoint is queued, want published")
	msg = failure(t, func(tb testing.TB) {
		db.RequireOutbox(tb, a.ID, kfsdbtest.OutboxWant{Status: kfstype.OutboxStatusCompleted})
	})
	require.Contains(t, msg, "status is pending, want completed")
	msg = failure(t, func(tb testing.TB) { db.RequireAttempt(tb, uuid.New(), kfsdbtest.AttemptWant{}) })
	require.Contains(t, msg, "no rows")
}
