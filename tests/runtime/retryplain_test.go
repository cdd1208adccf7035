package runtime_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/knowledgefs/kfsdb/kfstype"
	"github.com/knowledgefs/kfsdb/pgsource"
	"github.com/knowledgefs/kfsdb/tests/testfactory"
	"github.com/knowledgefs/kfsdb/worker"
)

// TestRetryPlainErrors: with worker.Config.RetryPlainErrors a plain
// handler error is retried within the attempt budget (three executions,
// then EXECUTION_ATTEMPTS_EXHAUSTED with the handler's last error), while
// worker.Fatal still fails at once; without it the plain error fails the
// attempt on its first run (upstream's rule). Direct delivery, so the
// retried attempt is fetched again as soon as its 1 ms backoff is over.
func TestRetryPlainErrors(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		retry bool
		// what the plain-error attempt must end as, and after how many runs
		code string
		runs int32
	}{
		{name: "Off", retry: false, code: kfstype.ErrorCodeCompilationFailed, runs: 1},
		{name: "On", retry: true, code: kfstype.ErrorCodeExecutionAttemptsExhausted, runs: 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, 8)
			ctx, pool := e.ctx, e.pool
			_, attempts := e.start(t, 1, 2, 3)
			plain, fatal := attempts[0].ID, attempts[1].ID
			var runs sync.Map
			h := worker.HandlerFunc(func(ctx context.Context, job *worker.Job) error {
				n, _ := runs.LoadOrStore(job.Attempt.ID, new(atomic.Int32))
				n.(*atomic.Int32).Add(1)
				if job.Attempt.ID == fatal {
					return worker.Fatal("PDF_ENCRYPTED", errors.New("cannot decrypt"))
				}
				return errors.New("boom")
			})
			w := e.directWorker(t, h, pgsource.Config{}, worker.Config{
				Concurrency: 2, RetryPlainErrors: tc.retry,
				RetryBackoffBase: time.Millisecond, RetryBackoffCap: time.Millisecond,
			})
			stop := testfactory.RunAll(ctx, t, w.Run)
			waitAllEnded(ctx, t, pool, []uuid.UUID{plain, fatal}, 30*time.Second)
			stop()

			rows := testfactory.RequireInvariants(ctx, t, pool, plain)
			require.Equal(t, kfstype.RunStateFailed, rows.Attempt.RunState)
			require.Equal(t, tc.code, *rows.Attempt.LastErrorCode)
			require.Contains(t, *rows.Attempt.LastErrorMessage, "boom")
			require.Equal(t, tc.runs, rows.Attempt.ExecutionAttempts)
			n, _ := runs.Load(plain)
			require.Equal(t, tc.runs, n.(*atomic.Int32).Load(), "handler runs of the plain-error attempt")

			rows = testfactory.RequireInvariants(ctx, t, pool, fatal)
			require.Equal(t, kfstype.RunStateFailed, rows.Attempt.RunState)
			require.Equal(t, "PDF_ENCRYPTED", *rows.Attempt.LastErrorCode)
			n, _ = runs.Load(fatal)
			require.EqualValues(t, 1, n.(*atomic.Int32).Load(), "worker.Fatal is never retried")
		})
	}
}
