package runtime_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/knowledgefs/kfsdb/kfstype"
	"github.com/knowledgefs/kfsdb/relay"
	"github.com/knowledgefs/kfsdb/repo"
	"github.com/knowledgefs/kfsdb/tests/testfactory"
	"github.com/knowledgefs/kfsdb/worker"
)

// panickyError is an error whose methods panic, as a handler's own error
// type with a bug might.
type panickyError struct{}

func (panickyError) Error() string { panic("Error method of a handler's error") }

// handlerResult is a handler's return value and what the worker must
// record for it.
type handlerResult struct {
	name  string
	err   func() error
	state kfstype.RunState
	code  string
	// message, when set, is the stored message exactly; otherwise it only
	// has to be non-empty.
	message string
}

// handlerResults are the results issue 13 found crashing the worker,
// storing a mangled code, or leaving the outcome unrecorded (the attempt
// was then run again).
var handlerResults = []handlerResult{
	{name: "FatalNilErr", err: func() error { return worker.Fatal("PDF_ENCRYPTED", nil) },
		state: kfstype.RunStateFailed, code: "PDF_ENCRYPTED"},
	{name: "RetryableNil", err: func() error { return worker.Retryable(nil) },
		state: kfstype.RunStateRetryWait, code: kfstype.ErrorCodeCompilationRetryable},
	{name: "FatalEmptyCode", err: func() error { return worker.Fatal("", errors.New("boom")) },
		state: kfstype.RunStateFailed, code: kfstype.ErrorCodeCompilationFailed, message: "boom"},
	{name: "FatalEmptyCodeNilErr", err: func() error { return worker.Fatal("", nil) },
		state: kfstype.RunStateFailed, code: kfstype.ErrorCodeCompilationFailed},
	{name: "TypedNilWorkerError", err: func() error { var e *worker.Error; return e },
		state: kfstype.RunStateFailed, code: kfstype.ErrorCodeCompilationFailed},
	{name: "WrappedTypedNilWorkerError", err: func() error { var e *worker.Error; return fmt.Errorf("wrapped: %w", e) },
		state: kfstype.RunStateFailed, code: kfstype.ErrorCodeCompilationFailed},
	{name: "TypedNilForeignError", err: func() error { var e *os.PathError; return e },
		state: kfstype.RunStateFailed, code: kfstype.ErrorCodeCompilationFailed},
	{name: "ErrorMethodPanics", err: func() error { return panickyError{} },
		state: kfstype.RunStateFailed, code: kfstype.ErrorCodeHandlerPanic},
	{name: "FatalOfPanickingError", err: func() error { return worker.Fatal("PDF_BROKEN", panickyError{}) },
		state: kfstype.RunStateFailed, code: kfstype.ErrorCodeHandlerPanic},
	{name: "RetryableOfPanickingError", err: func() error { return worker.Retryable(panickyError{}) },
		state: kfstype.RunStateFailed, code: kfstype.ErrorCodeHandlerPanic},

	// Codes are cut to 64 characters (runes), never inside a rune, and
	// sanitized; messages are never empty.
	{name: "MultibyteCodeCutByRunes", err: func() error { return worker.Fatal("X"+strings.Repeat("é", 70), errors.New("boom")) },
		state: kfstype.RunStateFailed, code: "X" + strings.Repeat("é", 63)},
	{name: "EmojiCodeCutByRunes", err: func() error { return worker.Fatal(strings.Repeat("🔥", 70), errors.New("boom")) },
		state: kfstype.RunStateFailed, code: strings.Repeat("🔥", 64)},
	{name: "RetryableMultibyteCode", err: func() error {
		return &worker.Error{Code: "R" + strings.Repeat("ü", 80), Retryable: true, Err: errors.New("later")}
	}, state: kfstype.RunStateRetryWait, code: "R" + strings.Repeat("ü", 63)},
	{name: "InvalidUTF8Code", err: func() error { return worker.Fatal("BAD\xffCODE", errors.New("boom")) },
		state: kfstype.RunStateFailed, code: "BAD\uFFFDCODE"},
	{name: "NULInCode", err: func() error { return worker.Fatal("NUL\x00CODE", errors.New("boom")) },
		state: kfstype.RunStateFailed, code: "NUL\uFFFDCODE"},
	{name: "EmptyMessage", err: func() error { return errors.New("") },
		state: kfstype.RunStateFailed, code: kfstype.ErrorCodeCompilationFailed},
	{name: "RetryableEmptyMessage", err: func() error { return &worker.Error{Retryable: true, Err: errors.New("")} },
		state: kfstype.RunStateRetryWait, code: kfstype.ErrorCodeCompilationRetryable},
	{name: "NULInMessage", err: func() error { return errors.New("a\x00b") },
		state: kfstype.RunStateFailed, code: kfstype.ErrorCodeCompilationFailed, message: "a\uFFFDb"},
	{name: "InvalidUTF8Message", err: func() error { return errors.New("a\xffb") },
		state: kfstype.RunStateFailed, code: kfstype.ErrorCodeCompilationFailed, message: "a\uFFFDb"},
}

// TestHandlerResultsAreRecorded runs a relay and a worker (Run, the
// completer on) over attempts whose handlers return each of
// handlerResults, and requires each result to end in a recorded outcome
// (failed with a code, or retry_wait): the handler ran once, the worker
// did not crash, nothing was handed back to run again.
func TestHandlerResultsAreRecorded(t *testing.T) {
	t.Parallel()
	runHandlerResults(t, handlerResults)
}

func runHandlerResults(t *testing.T, cases []handlerResult) {
	t.Helper()
	e := newEnv(t, 16)
	ctx, pool := e.ctx, e.pool
	// Two execution attempts, so a retry has one left.
	_, attempts := e.start(t, 1, len(cases), 2)
	byAttempt := make(map[uuid.UUID]handlerResult, len(cases))
	for i, a := range attempts {
		byAttempt[a.ID] = cases[i]
	}
	var mu sync.Mutex
	calls := map[uuid.UUID]int{}
	h := worker.HandlerFunc(func(ctx context.Context, job *worker.Job) error {
		mu.Lock()
		calls[job.Attempt.ID]++
		mu.Unlock()
		return byAttempt[job.Attempt.ID].err()
	})
	rl := e.relay(t, relay.Config{PollInterval: 50 * time.Millisecond})
	// A lease no run outlasts (a 2 s one lapsed whenever the machine
	// stalled between the lease and the outcome's write, and the re-run
	// failed the test): an outcome that is not recorded leaves its attempt
	// running, which the wait below never sees settle. A retry waits an
	// hour, so nothing runs twice.
	w := e.worker(t, h, worker.Config{
		LeaseDuration: ctLease, RetryBackoffBase: time.Hour, RetryBackoffCap: time.Hour,
	})
	stop := testfactory.RunAll(ctx, t, rl.Run, w.Run)

	ids := attemptIDs(attempts)
	require.Eventually(t, func() bool {
		var settled int
		require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM document_compilation_attempts
			WHERE id = ANY($1) AND run_state IN ('failed', 'retry_wait')`, ids).Scan(&settled))
		return settled == len(ids)
	}, hangAfter, 20*time.Millisecond, "every handler result is recorded as failed or retry_wait")
	stop()

	for _, a := range attempts {
		c := byAttempt[a.ID]
		t.Run(c.name, func(t *testing.T) {
			rows := testfactory.RequireInvariants(ctx, t, pool, a.ID)
			require.Equal(t, c.state, rows.Attempt.RunState)
			require.NotNil(t, rows.Attempt.LastErrorCode)
			require.Equal(t, c.code, *rows.Attempt.LastErrorCode)
			require.NotNil(t, rows.Attempt.LastErrorMessage)
			msg := *rows.Attempt.LastErrorMessage
			require.NotEmpty(t, msg)
			require.True(t, utf8.ValidString(msg))
			require.LessOrEqual(t, utf8.RuneCountInString(*rows.Attempt.LastErrorCode), repo.MaxErrorCodeLength)
			if c.message != "" {
				require.Equal(t, c.message, msg)
			}
			mu.Lock()
			defer mu.Unlock()
			require.Equal(t, 1, calls[a.ID], "the handler ran once")
		})
	}
}
