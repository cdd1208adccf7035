package relay

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"

	"github.com/google/uuid"

	"github.com/knowledgefs/kfsdb/internal/backoff"
	"github.com/knowledgefs/kfsdb/kfstype"
	"github.com/knowledgefs/kfsdb/observe"
	"github.com/knowledgefs/kfsdb/repo"
)

// outcome is the result of publishing one claimed row.
type outcome struct {
	msg *kfstype.OutboxMessage
	pub *Publication
	err error
}

// RunOnce claims one batch, publishes it and records the results. It
// returns how many rows it claimed. Tests call it directly.
func (r *Relay) RunOnce(ctx context.Context) (int, error) {
	if err := r.usable(ctx); err != nil {
		return 0, err
	}
	cctx, cancel := context.WithTimeout(ctx, r.cfg.WriteTimeout)
	msgs, err := r.cfg.Repo.ClaimOutbox(cctx, r.pool, &repo.ClaimOutboxParams{
		RelayID: r.cfg.ID, BatchSize: r.cfg.BatchSize, LockDuration: r.cfg.LockDuration,
	})
	cancel()
	if err != nil {
		return 0, fmt.Errorf("relay %s: claim: %w", r.cfg.ID, err)
	}
	if len(msgs) == 0 {
		return 0, nil
	}
	r.cfg.Metrics.Add(observe.Claimed, int64(len(msgs)))
	traces := r.traceContexts(ctx, msgs)

	outcomes := make([]outcome, len(msgs))
	sem := make(chan struct{}, r.cfg.Concurrency)
	var wg sync.WaitGroup
	for i, m := range msgs {
		outcomes[i].msg = m
		if ctx.Err() != nil {
			outcomes[i].err = ctx.Err() // shutting down: leave the rest claimed
			continue
		}
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			outcomes[i].pub, outcomes[i].err = r.publish(ctx, m, traces[m.AttemptID])
		}()
	}
	wg.Wait()

	// Record what happened even if ctx ended: what was published must be
	// marked, or it is published again after the lock expires.
	wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), r.cfg.WriteTimeout)
	defer cancel()
	var errs []error
	if err := r.markPublished(wctx, outcomes); err != nil {
		errs = append(errs, err)
	}
	for _, o := range outcomes {
		if o.err == nil || errors.Is(o.err, context.Canceled) && ctx.Err() != nil {
			continue
		}
		if err := r.release(wctx, o); err != nil {
			errs = append(errs, err)
		}
	}
	r.testSignals.BatchDone.Signal(len(msgs))
	return len(msgs), errors.Join(errs...)
}

func (r *Relay) publish(ctx context.Context, m *kfstype.OutboxMessage, tc kfstype.TraceContext) (*Publication, error) {
	payload, err := repo.DecodePayload(m.Payload)
	if err != nil {
		return nil, fmt.Errorf("corrupt payload: %w", err)
	}
	if payload.AttemptID != m.AttemptID {
		return nil, fmt.Errorf("corrupt payload: names attempt %s, row belongs to %s", payload.AttemptID, m.AttemptID)
	}
	pctx, cancel := context.WithTimeout(ctx, r.cfg.PublishTimeout)
	defer cancel()
	pub, err := r.pub.Publish(pctx, &Message{
		ID: m.ID, AttemptID: m.AttemptID, IdempotencyKey: m.IdempotencyKey, EventType: m.EventType,
		SchemaVersion: m.SchemaVersion, Payload: m.Payload, DispatchAttempts: m.DispatchAttempts, LockToken: *m.LockToken,
		TraceContext: tc,
	})
	if err != nil {
		return nil, err
	}
	if pub == nil {
		return nil, errors.New("publisher returned no queue job id")
	}
	// A job id MarkDispatched would refuse fails this publication alone,
	// instead of the whole batch's record (which would publish every row
	// again once its claim expired).
	if err := repo.ValidateJobID(pub.QueueJobID); err != nil {
		return nil, fmt.Errorf("publisher returned an unusable queue job id: %w", err)
	}
	if pub.ExternalJobID != nil {
		if err := repo.ValidateJobID(*pub.ExternalJobID); err != nil {
			return nil, fmt.Errorf("publisher returned an unusable external job id: %w", err)
		}
	}
	return pub, nil
}

// traceContexts reads the batch's Start trace contexts when the relay
// carries them. A failed read is logged and the batch goes out untraced:
// tracing never holds up a publication.
func (r *Relay) traceContexts(ctx context.Context, msgs []*kfstype.OutboxMessage) map[uuid.UUID]kfstype.TraceContext {
	if !r.cfg.TraceContexts {
		return nil
	}
	ids := make([]uuid.UUID, len(msgs))
	for i, m := range msgs {
		ids[i] = m.AttemptID
	}
	tctx, cancel := context.WithTimeout(ctx, r.cfg.WriteTimeout)
	defer cancel()
	tcs, err := r.cfg.Repo.TraceContexts(tctx, r.pool, &repo.TraceContextsParams{AttemptIDs: ids})
	if err != nil {
		r.log.WarnContext(ctx, "read trace contexts; publishing without them", "rows", len(msgs), "err", err)
	}
	return tcs
}

func (r *Relay) markPublished(ctx context.Context, outcomes []outcome) error {
	var ds []repo.Dispatch
	for _, o := range outcomes {
		if o.err == nil {
			ds = append(ds, repo.Dispatch{OutboxID: o.msg.ID, LockToken: *o.msg.LockToken, QueueJobID: o.pub.QueueJobID, ExternalJobID: o.pub.ExternalJobID})
		}
	}
	if len(ds) == 0 {
		return nil
	}
	res, err := r.cfg.Repo.MarkDispatched(ctx, r.pool, &repo.MarkDispatchedParams{Dispatches: ds, VisibilityTimeout: r.cfg.VisibilityTimeout})
	if err != nil {
		// The rows stay claimed; once the lock expires they are published
		// again (at least once).
		return fmt.Errorf("relay %s: mark %d published rows: %w", r.cfg.ID, len(ds), err)
	}
	r.cfg.Metrics.Add(observe.Published, int64(len(res.Marked)))
	if r.log.Enabled(ctx, slog.LevelDebug) {
		for _, m := range res.Marked {
			r.log.DebugContext(ctx, "outbox row published", "outbox_id", m.ID, "attempt_id", m.AttemptID, "dispatch_attempts", m.DispatchAttempts, "queue_job_id", m.QueueJobID)
		}
	}
	if len(res.Refused) > 0 {
		r.cfg.Metrics.Add(observe.MarkRefused, int64(len(res.Refused)))
		r.log.InfoContext(ctx, "published rows no longer ours to mark (claim expired or attempt ended)", "rows", len(res.Refused))
	}
	return nil
}

func (r *Relay) release(ctx context.Context, o outcome) error {
	r.cfg.Metrics.Add(observe.PublishFailed, 1)
	delay := backoff.Jitter(backoff.Exponential(r.cfg.BackoffBase, r.cfg.BackoffCap, o.msg.DispatchAttempts), 0.2)
	row, err := r.cfg.Repo.ReleaseOutbox(ctx, r.pool, &repo.ReleaseOutboxParams{
		OutboxID: o.msg.ID, LockToken: *o.msg.LockToken, Backoff: delay,
		MaxDispatchAttempts: r.cfg.MaxDispatchAttempts, LastError: o.err.Error(),
	})
	if errors.Is(err, repo.ErrOutboxLockLost) {
		return nil // someone else holds the row now; nothing to record
	}
	if err != nil {
		return fmt.Errorf("relay %s: release row %s: %w", r.cfg.ID, o.msg.ID, err)
	}
	switch row.Status {
	case kfstype.OutboxStatusDead:
		r.cfg.Metrics.Add(observe.DeadLettered, 1)
		r.log.WarnContext(ctx, "outbox row dead-lettered", "outbox_id", row.ID, "attempt_id", row.AttemptID, "dispatch_attempts", row.DispatchAttempts, "err", o.err)
	case kfstype.OutboxStatusLeased:
		r.log.WarnContext(ctx, "publish failed; the attempt's lease is live, the row follows it again", "outbox_id", row.ID, "attempt_id", row.AttemptID, "dispatch_attempts", row.DispatchAttempts, "due_at", row.AvailableAt, "err", o.err)
	default:
		r.log.WarnContext(ctx, "publish failed; backing off", "outbox_id", row.ID, "attempt_id", row.AttemptID, "dispatch_attempts", row.DispatchAttempts, "retry_in", delay, "err", o.err)
	}
	return nil
}
