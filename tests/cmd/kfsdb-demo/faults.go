package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/knowledgefs/kfsdb/kfstype"
	"github.com/knowledgefs/kfsdb/relay"
	"github.com/knowledgefs/kfsdb/repo"
	"github.com/knowledgefs/kfsdb/worker"
)

// errPoison is what the demo's publisher answers for attempts the broker
// refuses (dead-letter scenarios).
var errPoison = errors.New("demo broker: message rejected (poison)")

// demoPublisher is the relay's Publisher: memqueue, except for attempts
// the "broker" rejects (dead-letter scenarios).
type demoPublisher struct {
	w     *workload
	inner relay.Publisher
}

func (p *demoPublisher) Publish(ctx context.Context, msg *relay.Message) (*relay.Publication, error) {
	if e := p.w.entryByAttempt(msg.AttemptID); e != nil {
		if e.sc.name == scDeadLetter || (e.sc.name == scDeadLetterRetry && !e.retried.Load()) {
			e.rejected.Add(1)
			return nil, errPoison
		}
	}
	return p.inner.Publish(ctx, msg)
}

// crashingSource is the workers' Source: memqueue, except that the first
// delivery of each worker_crash attempt goes to a worker that takes the
// lease, does some work and dies without a word (no heartbeat, no
// outcome). The relay republishes the attempt once the lease expires.
type crashingSource struct {
	w     *workload
	inner worker.Source
}

func (s *crashingSource) Receive(ctx context.Context) (worker.Message, error) {
	for {
		msg, err := s.inner.Receive(ctx)
		if err != nil {
			return nil, err
		}
		e := s.w.entryByAttempt(msg.Delivery().AttemptID)
		if e == nil || e.sc.name != scWorkerCrash || !e.crash.CompareAndSwap(0, 1) {
			return msg, nil
		}
		if !s.w.dieWith(ctx, e, msg) {
			return msg, nil
		}
	}
}

// dieWith is the doomed worker: it reports whether it consumed msg.
func (w *workload) dieWith(ctx context.Context, e *entry, msg worker.Message) bool {
	d := msg.Delivery()
	var lease *repo.Lease
	err := w.lat.time(latCall+"AcquireLease (doomed worker)", func() (err error) {
		_, lease, err = w.repo.AcquireLease(ctx, w.pool, &repo.AcquireLeaseParams{Delivery: d, WorkerID: demoDoomedWorkerID, LeaseDuration: demoLease})
		return err
	})
	var te *repo.TransitionError
	if errors.Is(err, repo.ErrDeliveryPending) || (errors.As(err, &te) && te.From == kfstype.RunStateQueued) {
		// Delivered before the relay's MarkDispatched committed (a queued
		// refusal is the same race, explained after the commit).
		e.crash.Store(0)
		_ = msg.Retry(ctx, time.Now().Add(50*time.Millisecond))
		return true
	}
	if err != nil {
		w.log.Warn("doomed worker could not take its delivery; a real worker gets it", "attempt_id", d.AttemptID, "queue_job_id", d.QueueJobID, "err", err)
		e.crash.Store(0)
		return false // let a real worker judge it
	}
	for _, cp := range []kfstype.Checkpoint{kfstype.CheckpointParsed, kfstype.CheckpointOutlineBuilt} {
		if _, err := w.repo.Advance(ctx, w.pool, &repo.AdvanceParams{Lease: lease, Checkpoint: cp}); err != nil {
			w.violate(checkDoomedWorker, "attempt %d: doomed worker could not advance: %v", e.idx, err)
			break
		}
	}
	_ = msg.Ack(ctx)
	e.crash.Store(2)
	w.log.Info("doomed worker died holding a lease", "attempt_id", d.AttemptID, "lease_expires_at", lease.ExpiresAt)
	return true
}

// outage takes the broker down for demoOutage once 40% of the attempts
// were started.
func (w *workload) outage(ctx context.Context) {
	defer close(w.outageDone)
	want := int32(len(w.entries) * 2 / 5)
	for w.started.Load() < want {
		if sleepCtx(ctx, 20*time.Millisecond) != nil {
			return
		}
	}
	w.queue.SetOutage(true)
	w.outageOn.Store(true)
	fmt.Fprintf(w.out, "[%s] ** broker outage begins (every publish fails for %s)\n", w.elapsed(), demoOutage)
	_ = sleepCtx(ctx, demoOutage)
	w.queue.SetOutage(false)
	w.outageOn.Store(false)
	fmt.Fprintf(w.out, "[%s] ** broker outage ends\n", w.elapsed())
}
