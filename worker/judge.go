package worker

import (
	"cmp"
	"context"
	"errors"
	"fmt"

	"github.com/knowledgefs/kfsdb/internal/nilvalue"
	"github.com/knowledgefs/kfsdb/kfstype"
	"github.com/knowledgefs/kfsdb/observe"
	"github.com/knowledgefs/kfsdb/repo"
)

// verdict is what the worker records for a handler's error.
type verdict struct {
	// shutdown: the handler stopped because the worker is stopping; the
	// attempt is handed back (ScheduleRetry, WORKER_SHUTDOWN).
	shutdown bool
	// retry: ScheduleRetry while attempts remain; otherwise Fail.
	retry bool
	// code and message are what is stored: never empty, valid UTF-8
	// without NUL, the code at most 64 characters, so that Fail and
	// ScheduleRetry accept them.
	code    string
	message string
	// err is Result.Err: the handler's error, or one describing it when
	// the handler's error itself is unusable (a nil pointer, a panicking
	// method).
	err error
}

// judge works out the verdict on a handler's error once, and under
// recover: the error is the handler's code, and its Error, Is, As and
// Unwrap methods may panic, or it may be a nil pointer in a non-nil
// error. A nil pointer fails the attempt (DOCUMENT_COMPILATION_FAILED)
// without calling its methods; a method that panics fails it with
// DOCUMENT_COMPILATION_PANIC, like a handler that panicked. stopping
// says the worker's context has ended.
func (w *Worker) judge(herr error, stopping bool) (v verdict) {
	defer func() {
		if p := recover(); p != nil {
			w.cfg.Metrics.Add(observe.Panicked, 1)
			v = failedVerdict(kfstype.ErrorCodeHandlerPanic, fmt.Sprintf("panic in a method of the handler's error (%T): %v", herr, p))
		}
	}()
	if nilvalue.Is(herr) {
		return failedVerdict(kfstype.ErrorCodeCompilationFailed, fmt.Sprintf("the handler returned a nil %T as its error", herr))
	}
	v.err = herr
	var e *Error
	marked := errors.As(herr, &e) && e != nil
	switch {
	case stopping && errors.Is(herr, context.Canceled):
		v.shutdown, v.retry, v.code = true, true, ErrorCodeWorkerShutdown
		v.message = repo.TruncateMessage(ErrorCodeWorkerShutdown + ": " + herr.Error())
		return v
	case marked && e.Retryable, repo.IsRetryable(herr), !marked && w.cfg.RetryPlainErrors:
		v.retry, v.code = true, kfstype.ErrorCodeCompilationRetryable
	default:
		v.code = kfstype.ErrorCodeCompilationFailed
	}
	if marked {
		// Cut to 64 characters at a rune boundary; invalid UTF-8 and NUL
		// (which PostgreSQL's text refuses) become U+FFFD.
		v.code = cmp.Or(repo.TruncateErrorCode(e.Code), v.code)
	}
	v.message = cmp.Or(repo.TruncateMessage(herr.Error()), fmt.Sprintf("the handler returned a %T with an empty message", herr))
	return v
}

// failedVerdict fails the attempt with code and message, which also make
// up Result.Err.
func failedVerdict(code, message string) verdict {
	return verdict{code: code, message: message, err: Fatal(code, errors.New(message))}
}
