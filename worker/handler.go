package worker

import (
	"cmp"
	"context"

	"github.com/knowledgefs/kfsdb/internal/runcfg"
	"github.com/knowledgefs/kfsdb/kfstype"
)

// Handler compiles one attempt. It advances the attempt through job's
// checkpoints, binds the candidate publication at projection_built and
// returns nil once smoke_eval_passed is reached; the worker then completes
// the attempt. A handler with nothing to persist in between can instead
// call job.CompleteThrough and return nil: the worker then completes from
// any checkpoint in one write. ctx is canceled the moment the lease is
// lost (context.Cause is repo.ErrLeaseLost), or when a stop cancels the
// handlers it found running (context.Cause errors.Is ErrStopping:
// ErrStopTimeout after a graceful Stop's drain); returning ctx.Err() or
// the cause then hands the attempt back for another run. A handler that
// does not return within Config.CancelGrace of that is abandoned.
type Handler interface {
	Work(ctx context.Context, job *Job) error
}

// HandlerFunc adapts a function to Handler.
type HandlerFunc func(ctx context.Context, job *Job) error

// Work implements Handler. A nil HandlerFunc returns an error.
func (f HandlerFunc) Work(ctx context.Context, job *Job) error {
	if f == nil {
		return runcfg.Invalid("worker", "HandlerFunc", "must not be nil")
	}
	return f(ctx, job)
}

// Error is a handler error with the error code the attempt fails with.
type Error struct {
	Code      string
	Retryable bool
	Err       error
}

// Error returns "code: cause". It is safe on a nil *Error and on one
// without a code or cause.
func (e *Error) Error() string {
	switch {
	case e == nil:
		return "worker.Error(nil)"
	case e.Err == nil:
		return cmp.Or(e.Code, "worker.Error without a code or a cause")
	case e.Code == "":
		return e.Err.Error()
	}
	return e.Code + ": " + e.Err.Error()
}

// Unwrap returns the cause (nil for a nil *Error).
func (e *Error) Unwrap() error {
	if e == nil {
		return nil
	}
	return e.Err
}

// Retryable marks err as transient: the attempt is retried after a
// backoff while execution attempts remain (code
// DOCUMENT_COMPILATION_RETRYABLE). Handler errors for which
// repo.IsRetryable is true (a lost database connection, a serialization
// failure, a timeout) are retried the same way without being marked. err
// may be nil: the code is then the message.
func Retryable(err error) error {
	return &Error{Code: kfstype.ErrorCodeCompilationRetryable, Retryable: true, Err: err}
}

// Fatal fails the attempt with code (1..64 characters) and err's text:
// the attempt's last_error_code is the code and its last_error_message
// err's text (the text of the handler's error, with this Error's
// "code: " left out, so the code is stored once). An empty code means
// DOCUMENT_COMPILATION_FAILED; a longer one is cut to 64
// characters, and invalid UTF-8 and NUL bytes in it are replaced with
// U+FFFD (repo.TruncateErrorCode). err may be nil: the code is then the
// message; an empty message is replaced with one naming the error's type.
func Fatal(code string, err error) error {
	return &Error{Code: code, Err: err}
}
