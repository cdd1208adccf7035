package worker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/knowledgefs/kfsdb/kfstype"
	"github.com/knowledgefs/kfsdb/observe"
	"github.com/knowledgefs/kfsdb/repo"
)

// completion is the write that completes an attempt under lease:
// Complete, or CompleteThrough when the handler asked for it
// (job.CompleteThrough left its candidate in through). The worker makes
// that choice here, for one completion (complete) and for a batch's
// entries (entry, in completer.go).
type completion struct {
	lease   *repo.Lease
	through *repo.CompleteThroughParams
}

// completionOf is job's completion under lease.
func completionOf(job *Job, lease *repo.Lease) completion {
	return completion{lease: lease, through: job.through}
}

// complete records one completion in its own statement.
func (w *Worker) complete(ctx context.Context, c completion) (*kfstype.Attempt, error) {
	if c.through == nil {
		return w.cfg.Repo.Complete(ctx, w.pool, &repo.CompleteParams{Lease: c.lease})
	}
	p := *c.through
	p.Lease = c.lease
	return w.cfg.Repo.CompleteThrough(ctx, w.pool, &p)
}

// completed records the outcome of a handler that returned nil, given what
// its completion returned (the completed attempt, or werr), and settles
// the delivery.
func (w *Worker) completed(ctx, wctx context.Context, log *slog.Logger, msg Message, lease *repo.Lease, a *kfstype.Attempt, werr error, res Result) Result {
	switch {
	case errors.Is(werr, repo.ErrInvalidTransition) || errors.Is(werr, repo.ErrCandidateRejected) || errors.Is(werr, repo.ErrInvalidInput):
		// The handler returned without reaching smoke_eval_passed, or
		// left a candidate (job.CompleteThrough) that cannot be bound:
		// running it again would end the same way.
		v := w.judge(Fatal(kfstype.ErrorCodeCompilationFailed, fmt.Errorf("completing the attempt was refused: %w", werr)), false)
		res.Err = v.err
		werr = w.fail(wctx, lease, v, &res)
	case werr == nil:
		res.Outcome = OutcomeCompleted
		w.cfg.Metrics.Add(observe.Completed, 1)
		if w.durations != nil && a != nil && a.CompletedAt != nil {
			w.durations.Observe(observe.StartToSucceeded, a.CompletedAt.Sub(a.CreatedAt))
		}
	}
	return w.settle(ctx, wctx, log, msg, lease, werr, res)
}

// retry schedules another execution after delay (ScheduleRetry), or fails
// the attempt once its execution attempts are spent, and says which in
// res.Outcome.
func (w *Worker) retry(ctx context.Context, lease *repo.Lease, a *kfstype.Attempt, v verdict, delay time.Duration, res *Result) error {
	if a.ExecutionAttempts >= a.MaxExecutionAttempts {
		w.cfg.Metrics.Add(observe.Exhausted, 1)
		_, err := w.cfg.Repo.Fail(ctx, w.pool, &repo.FailParams{
			Lease: lease, ErrorCode: kfstype.ErrorCodeExecutionAttemptsExhausted,
			ErrorMessage: fmt.Sprintf("execution attempts exhausted (%d of %d); last error: %s: %s", a.ExecutionAttempts, a.MaxExecutionAttempts, v.code, v.message),
		})
		res.Outcome, res.ErrorCode = OutcomeExhausted, kfstype.ErrorCodeExecutionAttemptsExhausted
		return err
	}
	_, err := w.cfg.Repo.ScheduleRetry(ctx, w.pool, &repo.ScheduleRetryParams{
		Lease: lease, RetryDelay: delay, ErrorCode: v.code, ErrorMessage: v.message,
	})
	if err == nil {
		w.cfg.Metrics.Add(observe.Retried, 1)
	}
	res.Outcome, res.ErrorCode = OutcomeRetried, v.code
	return err
}

// fail ends the attempt as failed with the verdict's code and message.
func (w *Worker) fail(ctx context.Context, lease *repo.Lease, v verdict, res *Result) error {
	_, err := w.cfg.Repo.Fail(ctx, w.pool, &repo.FailParams{Lease: lease, ErrorCode: v.code, ErrorMessage: v.message})
	if err == nil {
		w.cfg.Metrics.Add(observe.Failed, 1)
	}
	res.Outcome, res.ErrorCode = OutcomeFailed, v.code
	return err
}

// abandon hands back the attempt of a handler the stop abandoned (r's
// third phase), under the lease it still holds: ScheduleRetry with
// WORKER_SHUTDOWN, or Fail as exhausted with no execution attempt left.
// Its fence (the lease token and worker id) is what keeps the handler's
// late writes out, since the handler runs on. With the lease lost
// already, there is nothing to hand back.
func (w *Worker) abandon(ctx, wctx context.Context, log *slog.Logger, msg Message, lease *repo.Lease, a *kfstype.Attempt, lost bool, r *run, res Result) Result {
	w.cfg.Metrics.Add(observe.HandlersAbandoned, 1)
	res.Err = ErrHandlerAbandoned
	if lost {
		r.notHandedBack.Add(1)
		w.cfg.Metrics.Add(observe.LeasesLost, 1)
		log.WarnContext(ctx, "handler abandoned after its lease was lost", "cancel_grace", w.cfg.CancelGrace)
		res.Outcome = OutcomeLeaseLost
		w.ack(wctx, log, msg)
		return res
	}
	v := verdict{shutdown: true, retry: true, code: ErrorCodeWorkerShutdown, err: ErrHandlerAbandoned,
		message: fmt.Sprintf("the worker stopped and abandoned the handler: it had not returned %s after its context was canceled", w.cfg.CancelGrace)}
	werr := w.retry(wctx, lease, a, v, time.Second, &res)
	if res.Outcome == OutcomeRetried {
		res.Outcome = OutcomeAbandoned
	}
	res = w.settle(ctx, wctx, log, msg, lease, werr, res)
	if werr != nil {
		r.notHandedBack.Add(1)
	}
	return res
}

// settle acknowledges the delivery once its outcome is recorded (werr ==
// nil) or the lease is lost, and otherwise hands it back for after the
// lease.
func (w *Worker) settle(ctx, wctx context.Context, log *slog.Logger, msg Message, lease *repo.Lease, werr error, res Result) Result {
	if werr != nil {
		res.ErrorCode = "" // nothing was recorded
		if errors.Is(werr, repo.ErrLeaseLost) {
			w.cfg.Metrics.Add(observe.LeasesLost, 1)
			res.Outcome, res.Err = OutcomeLeaseLost, werr
			w.ack(wctx, log, msg)
			return res
		}
		// The outcome is not recorded: deliver again after the lease, when
		// this or another worker can take it over.
		log.ErrorContext(ctx, "recording the outcome failed; will be redelivered", "err", werr)
		res.Outcome, res.Err = OutcomeDeferred, werr
		w.retryDelivery(wctx, log, msg, lease.ExpiresAt)
		return res
	}
	logOutcome(ctx, log, res)
	w.ack(wctx, log, msg)
	return res
}

// logOutcome writes the one line of a recorded outcome: DEBUG for a
// success or an attempt handed back by a stopping worker, WARN for a
// failure (retried or final). The error is the handler's, as recorded.
func logOutcome(ctx context.Context, log *slog.Logger, res Result) {
	switch res.Outcome {
	case OutcomeCompleted:
		log.DebugContext(ctx, "attempt succeeded")
	case OutcomeReleased:
		log.DebugContext(ctx, "attempt handed back", "outcome", res.Outcome)
	case OutcomeAbandoned:
		log.WarnContext(ctx, "handler abandoned; attempt handed back", "outcome", res.Outcome)
	case OutcomeRetried:
		log.WarnContext(ctx, "attempt failed; retry scheduled", "outcome", res.Outcome, "err", res.Err)
	case OutcomeFailed, OutcomeExhausted:
		log.WarnContext(ctx, "attempt failed", "outcome", res.Outcome, "err", res.Err)
	}
}

// ack acknowledges the delivery; a failed Ack is logged only (the queue
// redelivers it).
func (w *Worker) ack(ctx context.Context, log *slog.Logger, msg Message) {
	if err := msg.Ack(ctx); err != nil {
		log.ErrorContext(ctx, "ack failed; the queue will redeliver", "err", err)
	}
}

// retryDelivery hands the delivery back to the queue, to come again not
// before notBefore; a failure is logged only.
func (w *Worker) retryDelivery(ctx context.Context, log *slog.Logger, msg Message, notBefore time.Time) {
	if err := msg.Retry(ctx, notBefore); err != nil {
		log.ErrorContext(ctx, "handing the delivery back failed", "err", err)
	}
}
