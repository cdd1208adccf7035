package main

import (
	"context"
	"fmt"
	"time"

	"github.com/knowledgefs/kfsdb/kfstype"
	"github.com/knowledgefs/kfsdb/repo"
)

// control runs the control-plane action of e's scenario, if any, after
// e was started.
func (w *workload) control(ctx context.Context, e *entry) error {
	switch e.sc.name {
	case scCancelDeferred:
		if err := sleepCtx(ctx, demoCancelAfter); err != nil {
			return err
		}
		return w.lat.time(latCall+"Cancel", func() error {
			_, err := w.repo.Cancel(ctx, w.pool, &repo.CancelParams{AttemptRef: w.ref(e), Reason: new("upload withdrawn before compilation")})
			return err
		})
	case scDeferredRelease:
		if err := sleepCtx(ctx, demoReleaseAfter); err != nil {
			return err
		}
		ref := w.ref(e)
		return w.lat.time(latCall+"ReleaseDeferred", func() error {
			_, err := w.repo.ReleaseDeferred(ctx, w.pool, &repo.ReleaseDeferredParams{AttemptRef: ref})
			return err
		})
	case scCancelRunning, scSupersedeRunning:
		// No deadline of its own: a handler that never starts leaves the
		// workload without movement, which awaitSettled reports as a stall
		// (and ends ctx); a fixed wait failed on a loaded machine.
		select {
		case <-e.handlerStarted:
		case <-ctx.Done():
			return ctx.Err()
		}
		defer close(e.ended)
		if e.sc.name == scCancelRunning {
			return w.lat.time(latCall+"Cancel", func() error {
				_, err := w.repo.Cancel(ctx, w.pool, &repo.CancelParams{AttemptRef: w.ref(e), Reason: new("canceled by the operator")})
				return err
			})
		}
		return w.lat.time(latCall+"Supersede", func() error {
			_, err := w.repo.Supersede(ctx, w.pool, &repo.SupersedeParams{AttemptRef: w.ref(e), Reason: new("document version 2 uploaded")})
			return err
		})
	case scManualRetry, scDeadLetterRetry:
		// Polls until the attempt has failed; like the wait above, it has
		// no deadline of its own (awaitSettled's stall rule ends ctx).
		for {
			var a *kfstype.Attempt
			if err := w.lat.time(latCall+"GetAttempt", func() (err error) {
				a, err = w.repo.GetAttempt(ctx, w.pool, &repo.GetAttemptParams{TenantID: e.tenantID, AttemptID: e.attempt()})
				return err
			}); err != nil {
				return err
			}
			if a.RunState == kfstype.RunStateFailed {
				break
			}
			if a.RunState.Terminal() {
				return fmt.Errorf("attempt %d (%s): ended %s before the manual retry", e.idx, e.sc.name, a.RunState)
			}
			if err := sleepCtx(ctx, 100*time.Millisecond); err != nil {
				return err
			}
		}
		e.retried.Store(true)
		ref := w.ref(e)
		return w.lat.time(latCall+"RetryFailed", func() error {
			_, err := w.repo.RetryFailed(ctx, w.pool, &repo.RetryFailedParams{AttemptRef: ref})
			return err
		})
	}
	return nil
}
