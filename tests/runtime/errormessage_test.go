package runtime_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/knowledgefs/kfsdb/kfstype"
	"github.com/knowledgefs/kfsdb/tests/testfactory"
	"github.com/knowledgefs/kfsdb/worker"
)

// TestStoredMessageSaysCodeOnce: the worker stores a coded handler error's
// code in last_error_code and its text in last_error_message without the
// code again (it stored "PDF_ENCRYPTED: …" beside PDF_ENCRYPTED, shown as
// "PDF_ENCRYPTED: PDF_ENCRYPTED: …"). Each case runs a real handler
// through Worker.Process and reads the row back.
func TestStoredMessageSaysCodeOnce(t *testing.T) {
	t.Parallel()
	b := setupWorker(t)
	var result func() error // set before each Process, which runs the handler
	w := b.worker(t, func(context.Context, *worker.Job) error { return result() }, worker.Config{})
	cases := []struct {
		name        string
		maxAttempts int32
		err         func() error
		state       kfstype.RunState
		code        string
		message     string
	}{
		{name: "Fatal", err: func() error { return worker.Fatal("PDF_ENCRYPTED", errors.New("the document is password protected")) },
			state: kfstype.RunStateFailed, code: "PDF_ENCRYPTED", message: "the document is password protected"},
		{name: "WrappedFatal", err: func() error {
			return fmt.Errorf("page 3: %w", worker.Fatal("PDF_ENCRYPTED", errors.New("the document is password protected")))
		}, state: kfstype.RunStateFailed, code: "PDF_ENCRYPTED", message: "page 3: the document is password protected"},
		{name: "Retryable", err: func() error { return worker.Retryable(errors.New("object store timeout")) },
			state: kfstype.RunStateRetryWait, code: kfstype.ErrorCodeCompilationRetryable, message: "object store timeout"},
		{name: "Exhausted", maxAttempts: 1, err: func() error { return worker.Retryable(errors.New("object store timeout")) },
			state: kfstype.RunStateFailed, code: kfstype.ErrorCodeExecutionAttemptsExhausted,
			message: "execution attempts exhausted (1 of 1); last error: DOCUMENT_COMPILATION_RETRYABLE: object store timeout"},
		{name: "CompletionRefused", err: func() error { return nil }, // returns before smoke_eval_passed
			state: kfstype.RunStateFailed, code: kfstype.ErrorCodeCompilationFailed,
			message: "completing the attempt was refused: "},
		{name: "FatalWithoutCause", err: func() error { return worker.Fatal("PDF_ENCRYPTED", nil) },
			state: kfstype.RunStateFailed, code: "PDF_ENCRYPTED", message: "PDF_ENCRYPTED"},
	}
	// A document version each: a retried attempt stays live on its own.
	docs := testfactory.SeedDocuments(b.ctx, t, b.pool, 1, len(cases))
	for i, tc := range cases {
		result, b.doc = tc.err, docs[i]
		a, res := b.processOne(t, w, tc.maxAttempts)
		rows := b.rows(t, a.ID)
		require.Equal(t, tc.state, rows.Attempt.RunState, "%s: %v", tc.name, res.Err)
		require.Equal(t, tc.code, *rows.Attempt.LastErrorCode, tc.name)
		msg := *rows.Attempt.LastErrorMessage
		if strings.HasSuffix(tc.message, ": ") {
			require.True(t, strings.HasPrefix(msg, tc.message), "%s: %q", tc.name, msg)
		} else {
			require.Equal(t, tc.message, msg, tc.name)
		}
		if tc.message != tc.code {
			require.NotContains(t, msg, tc.code+": "+tc.code, tc.name)
			require.False(t, strings.HasPrefix(msg, tc.code+": "), "%s: the message repeats the code: %q", tc.name, msg)
		}
	}
}
