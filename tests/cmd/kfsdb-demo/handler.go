package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"

	"github.com/knowledgefs/kfsdb/kfstype"
	"github.com/knowledgefs/kfsdb/worker"
)

// Work is the demo's worker.Handler: it behaves as e's scenario says.
func (w *workload) Work(ctx context.Context, job *worker.Job) error {
	e := w.byAsset[job.Attempt.DocumentAssetID]
	if e == nil {
		return worker.Fatal("DEMO_UNKNOWN_ATTEMPT", fmt.Errorf("attempt %s is not the demo's", job.Attempt.ID))
	}
	if e.active.Add(1) > 1 {
		w.violate(checkNoOverlap, "attempt %d (%s): two handlers at once", e.idx, e.sc.name)
	}
	defer e.active.Add(-1)
	e.executions.Add(1)
	w.checkLease(ctx, e, job)

	switch e.sc.name {
	case scRetryOnce:
		if job.Attempt.ExecutionAttempts == 1 {
			if err := w.advanceTo(ctx, job, e, kfstype.CheckpointParsed); err != nil {
				return err
			}
			return worker.Retryable(errors.New("embedding service timed out"))
		}
	case scFatal:
		if err := w.advanceTo(ctx, job, e, kfstype.CheckpointParsed); err != nil {
			return err
		}
		return worker.Fatal(kfstype.ErrorCodeCompilationFailed, errors.New("PDF is encrypted"))
	case scPanic:
		panic(fmt.Sprintf("demo: nil outline node in attempt %d", e.idx))
	case scExhausted:
		return worker.Retryable(errors.New("parser backend unavailable"))
	case scManualRetry:
		if !e.retried.Load() {
			if err := w.advanceTo(ctx, job, e, kfstype.CheckpointNodesGenerated); err != nil {
				return err
			}
			return worker.Fatal(kfstype.ErrorCodeCompilationFailed, errors.New("model quota exceeded"))
		}
	case scCancelRunning, scSupersedeRunning:
		if err := w.advanceTo(ctx, job, e, kfstype.CheckpointParsed); err != nil {
			return err
		}
		e.startedOnce.Do(func() { close(e.handlerStarted) })
		select {
		case <-e.ended:
		case <-ctx.Done(): // the heartbeat saw the lease go
			return context.Cause(ctx)
		case <-time.After(demoHandlerMaxBlock):
		}
		// Carries on as if nothing happened; the next write is refused.
	}
	return w.advanceTo(ctx, job, e, kfstype.CheckpointSmokeEvalPassed)
}

// checkLease verifies, as a handler starts, that the database has the
// attempt running under this handler's unexpired lease: a handler must
// never run for an attempt that is terminal or someone else's.
func (w *workload) checkLease(ctx context.Context, e *entry, job *worker.Job) {
	w.leaseChecks.Add(1)
	var state string
	var token *uuid.UUID
	var live bool
	err := w.pool.QueryRow(ctx, `SELECT run_state, lease_token, coalesce(lease_expires_at > now(), false)
		FROM document_compilation_attempts WHERE id = $1`, job.Attempt.ID).Scan(&state, &token, &live)
	switch {
	case err != nil:
		w.violate(checkLeaseHeld, "attempt %d: could not read it: %v", e.idx, err)
	case state != string(kfstype.RunStateRunning) || token == nil || *token != job.Lease().Token || !live:
		w.violate(checkLeaseHeld, "attempt %d (%s): handler started while the attempt is %s (own lease: %t, unexpired: %t)",
			e.idx, e.sc.name, state, token != nil && *token == job.Lease().Token, live)
	}
}

// advanceTo walks the job's checkpoints up to target, binding e's
// candidate publication at projection_built; each step "works" a few
// milliseconds.
func (w *workload) advanceTo(ctx context.Context, job *worker.Job, e *entry, target kfstype.Checkpoint) error {
	cps := kfstype.Checkpoints()
	for r := job.Attempt.Checkpoint.Rank() + 1; r <= target.Rank(); r++ {
		cp := cps[r]
		if err := sleepCtx(ctx, time.Duration(1+(e.idx+r)%4)*time.Millisecond); err != nil {
			return err
		}
		var err error
		if cp == kfstype.CheckpointProjectionBuilt && job.Attempt.CandidatePublicationID == nil {
			err = job.BindCandidate(ctx, cp, e.pubID, e.fingerprint)
		} else {
			err = job.Advance(ctx, cp)
		}
		if err != nil {
			return err
		}
	}
	return nil
}
