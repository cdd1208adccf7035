package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/knowledgefs/kfsdb/bench/kfsdb-bench/delivery"
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

// crashingSource is the workers' Source: memqueue or a pgsource.Source,
// except that the first delivery of each worker_crash attempt goes to a
// doomed worker that holds the lease, does some work and dies without a
// word (no heartbeat, no outcome). Once the lease expires the relay
// republishes the attempt, or a source fetches it again.
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

// crashingLeasingSource is crashingSource over a pgsource.Source: the
// worker binds and runs the inner source through it. The message the
// doomed worker dies with was leased by the fetch, so the slot that
// fetched it plays the doomed worker, and its lease is abandoned as a
// dead process would leave it, which no shutdown path of worker or
// pgsource does (they hand leases back).
type crashingLeasingSource struct {
	crashingSource
	leasing worker.LeasingSource
}

func newCrashingLeasingSource(w *workload, src worker.LeasingSource) *crashingLeasingSource {
	return &crashingLeasingSource{crashingSource: crashingSource{w: w, inner: src}, leasing: src}
}

// Bind implements worker.LeasingSource.
func (s *crashingLeasingSource) Bind(workerID string, leaseDuration time.Duration, slots int) error {
	return s.leasing.Bind(workerID, leaseDuration, slots)
}

// Run implements worker.LeasingSource.
func (s *crashingLeasingSource) Run(ctx context.Context) error { return s.leasing.Run(ctx) }

// dieWith is the doomed worker: it reports whether it consumed msg.
func (w *workload) dieWith(ctx context.Context, e *entry, msg worker.Message) bool {
	d := msg.Delivery()
	lease, consumed := w.doomedLease(ctx, e, msg)
	if lease == nil {
		return consumed
	}
	for _, cp := range []kfstype.Checkpoint{kfstype.CheckpointParsed, kfstype.CheckpointOutlineBuilt} {
		if _, err := w.repo.Advance(ctx, w.pool, &repo.AdvanceParams{Lease: lease, Checkpoint: cp}); err != nil {
			w.violate(checkDoomedWorker, "attempt %d: doomed worker could not advance: %v", e.idx, err)
			break
		}
	}
	_ = msg.Ack(ctx)
	e.crash.Store(2)
	w.deaths.Add(1)
	w.log.Info("doomed worker died holding a lease", "attempt_id", d.AttemptID, "lease_worker", lease.WorkerID, "lease_expires_at", lease.ExpiresAt)
	return true
}

// doomedLease is the lease the doomed worker dies with: the one a
// pgsource fetch took, else one it acquires for the relay's delivery.
// Without a lease it reports whether it consumed msg, and resets e's
// crash state so that a later delivery dies instead.
func (w *workload) doomedLease(ctx context.Context, e *entry, msg worker.Message) (*repo.Lease, bool) {
	if lm, ok := msg.(worker.LeasedMessage); ok {
		if _, lease := lm.Leased(); lease != nil {
			return lease, true
		}
	}
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
		return nil, true
	}
	if err != nil {
		w.log.Warn("doomed worker could not take its delivery; a real worker gets it", "attempt_id", d.AttemptID, "queue_job_id", d.QueueJobID, "err", err)
		e.crash.Store(0)
		return nil, false // let a real worker judge it
	}
	return lease, true
}

// outage takes the broker down for demoOutage once 40% of the attempts
// were started (relay delivery only: postgres delivery has no broker).
func (w *workload) outage(ctx context.Context) {
	defer close(w.outageDone)
	if w.mode != delivery.Relay {
		return
	}
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
