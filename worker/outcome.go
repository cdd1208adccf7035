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

// settle acknowledges the delivery once its outcome is recorded (werr ==
// nil) or the lease is lost, and otherwise hands it back for after the
// lease.
func (w *Worker) settle(ctx, wctx context.Context, log *slog.Logger, msg Message, lease *repo.Lease, werr error, res Result) Result {
	if werr != nil {
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
	case OutcomeRetried:
		log.WarnContext(ctx, "attempt failed; retry scheduled", "outcome", res.Outcome, "err", res.Err)
	case OutcomeFailed, OutcomeExhausted:
		log.WarnContext(ctx, "attempt failed", "outcome", res.Outcome, "err", res.Err)
	}
}

func (w *Worker) retry(ctx context.Context, lease *repo.Lease, a *kfstype.Attempt, v verdict, delay time.Duration, res *Result) error {
	if a.ExecutionAttempts >= a.MaxExecutionAttempts {
		w.cfg.Metrics.Add(observe.Exhausted, 1)
		_, err := w.cfg.Repo.Fail(ctx, w.pool, &repo.FailParams{
			Lease: lease, ErrorCode: kfstype.ErrorCodeExecutionAttemptsExhausted,
			ErrorMessage: fmt.Sprintf("execution attempts exhausted (%d of %d); last error: %s", a.ExecutionAttempts, a.MaxExecutionAttempts, v.message),
		})
		res.Outcome = OutcomeExhausted
		return err
	}
	_, err := w.cfg.Repo.ScheduleRetry(ctx, w.pool, &repo.ScheduleRetryParams{
		Lease: lease, RetryDelay: delay, ErrorCode: v.code, ErrorMessage: v.message,
	})
	if err == nil {
		w.cfg.Metrics.Add(observe.Retried, 1)
	}
	res.Outcome = OutcomeRetried
	return err
}

func (w *Worker) fail(ctx context.Context, lease *repo.Lease, v verdict, res *Result) error {
	_, err := w.cfg.Repo.Fail(ctx, w.pool, &repo.FailParams{Lease: lease, ErrorCode: v.code, ErrorMessage: v.message})
	if err == nil {
		w.cfg.Metrics.Add(observe.Failed, 1)
	}
	res.Outcome = OutcomeFailed
	return err
}

func (w *Worker) ack(ctx context.Context, log *slog.Logger, msg Message) {
	if err := msg.Ack(ctx); err != nil {
		log.ErrorContext(ctx, "ack failed; the queue will redeliver", "err", err)
	}
}

func (w *Worker) retryDelivery(ctx context.Context, log *slog.Logger, msg Message, notBefore time.Time) {
	if err := msg.Retry(ctx, notBefore); err != nil {
		log.ErrorContext(ctx, "handing the delivery back failed", "err", err)
	}
}
