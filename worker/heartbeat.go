package worker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/knowledgefs/kfsdb/repo"
)

// runWithHeartbeat runs the handler while a goroutine extends the lease.
// It reports whether the lease was lost; the handler's context is canceled
// with cause repo.ErrLeaseLost the moment it is. Each renewal also extends
// msg when it is an Extender.
func (w *Worker) runWithHeartbeat(ctx context.Context, job *Job, msg Message, log *slog.Logger) (err error, lost bool) {
	hctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	var lostFlag atomic.Bool
	beatCtx, stopBeat := context.WithCancel(context.WithoutCancel(ctx))
	done := make(chan struct{})
	go func() {
		defer close(done)
		ext, _ := msg.(Extender)
		w.heartbeat(beatCtx, job, ext, log, func(cause error) {
			lostFlag.Store(true)
			cancel(cause)
		})
	}()
	err = w.call(hctx, job)
	stopBeat()
	<-done
	return err, lostFlag.Load()
}

// heartbeat extends the lease every HeartbeatInterval until ctx ends. A
// refusal means the lease is lost; other errors are retried until the
// lease would have expired. Each call is bounded by the lease's expiry, so
// a call stuck on an unresponsive server ends the lease on time. After a
// renewal it extends ext (may be nil), the message's redelivery deadline.
func (w *Worker) heartbeat(ctx context.Context, job *Job, ext Extender, log *slog.Logger, lose func(error)) {
	t := time.NewTicker(w.cfg.HeartbeatInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		cur := job.Lease()
		// A heartbeat that has not returned by the lease's expiry is too
		// late (a frozen server or a hung connection): giving up then stops
		// the handler when the lease ends instead of whenever the call does.
		callCtx, cancelCall := context.WithDeadline(ctx, cur.ExpiresAt)
		renewed, err := w.cfg.Repo.Heartbeat(callCtx, w.pool, &repo.HeartbeatParams{Lease: cur, LeaseDuration: w.cfg.LeaseDuration})
		cancelCall()
		switch {
		case err == nil:
			job.lease.Store(renewed)
			if ext != nil {
				if err := ext.Extend(ctx); err != nil {
					log.WarnContext(ctx, "extending the delivery's deadline failed; the queue may redeliver it (the lease still fences the attempt)", "err", err)
				}
			}
		case ctx.Err() != nil:
			return
		case errors.Is(err, repo.ErrLeaseLost), errors.Is(err, repo.ErrNotFound):
			lose(fmt.Errorf("%w: %w", repo.ErrLeaseLost, err))
			return
		case !time.Now().Before(cur.ExpiresAt):
			lose(fmt.Errorf("%w: could not heartbeat before expiry: %w", repo.ErrLeaseLost, err))
			return
		default:
			log.WarnContext(ctx, "heartbeat failed; retrying", "err", err)
		}
	}
}
