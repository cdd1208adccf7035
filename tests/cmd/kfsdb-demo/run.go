package main

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/knowledgefs/kfsdb/bench/kfsdb-bench/delivery"
	"github.com/knowledgefs/kfsdb/kfstype"
	"github.com/knowledgefs/kfsdb/observe"
	"github.com/knowledgefs/kfsdb/pgsource"
	"github.com/knowledgefs/kfsdb/relay"
	"github.com/knowledgefs/kfsdb/worker"
)

// stateCounts counts the demo database's attempts per run state.
func (w *workload) stateCounts(ctx context.Context) (map[kfstype.RunState]int, error) {
	rows, err := w.pool.Query(ctx, `SELECT run_state, count(*) FROM document_compilation_attempts GROUP BY run_state`)
	if err != nil {
		return nil, err
	}
	out := map[kfstype.RunState]int{}
	for rows.Next() {
		var s string
		var n int
		if err := rows.Scan(&s, &n); err != nil {
			return nil, err
		}
		out[kfstype.RunState(s)] = n
	}
	return out, rows.Err()
}

func (w *workload) progressLine(counts map[kfstype.RunState]int) string {
	var live, done []string
	for _, s := range kfstype.RunStates() {
		part := fmt.Sprintf("%s %d", s, counts[s])
		if s.Live() {
			live = append(live, part)
		} else {
			done = append(done, part)
		}
	}
	line := fmt.Sprintf("[%s] started %d/%d | %s | %s | %s",
		w.elapsed(), w.started.Load(), len(w.entries), strings.Join(live, "  "), strings.Join(done, "  "), w.deliveryProgress())
	if w.outageOn.Load() {
		line += " | OUTAGE"
	}
	return line
}

// deliveryProgress is the progress line's delivery part: the messages
// waiting in the queue (relay), or the sources' fetches and the leases
// they took (postgres).
func (w *workload) deliveryProgress() string {
	if w.mode == delivery.Relay {
		return fmt.Sprintf("queue %d", w.queue.Len())
	}
	return fmt.Sprintf("%s %d  %s %d", observe.Fetches, w.metrics.Get(observe.Fetches), observe.FetchedLeases, w.metrics.Get(observe.FetchedLeases))
}

// run drives the workload until every attempt is terminal and every
// control-plane action is done, or until deadline.
func (w *workload) run(ctx context.Context, deadline time.Duration) error {
	if err := w.setup(ctx); err != nil {
		return err
	}
	rctx, stopRuntime := context.WithCancel(ctx)
	var runtimeWG sync.WaitGroup
	stopped := false
	stop := func() {
		if !stopped {
			stopped = true
			stopRuntime()
			runtimeWG.Wait()
		}
	}
	defer stop()
	if err := w.startRuntime(rctx, &runtimeWG); err != nil {
		return err
	}

	w.t0 = time.Now()
	errs := make(chan error, len(w.entries)*2)
	allIssued := w.startProducers(rctx, errs)
	runtimeWG.Go(func() { w.outage(rctx) })
	defer func() {
		// Producers and control-plane calls end with rctx.
		stopRuntime()
		<-allIssued
	}()
	if err := w.awaitSettled(ctx, deadline, errs, allIssued); err != nil {
		return err
	}
	elapsed := time.Since(w.t0)
	stop()
	<-w.outageDone
	stopping := "workers"
	if w.mode == delivery.Relay {
		stopping = "relay and workers"
	}
	fmt.Fprintf(w.out, "== settled: %d attempts terminal after %s; %s stopped\n", len(w.entries), elapsed.Round(10*time.Millisecond), stopping)
	return nil
}

// startRuntime starts demoWorkers workers, and under relay delivery the
// relay, in wg; they run until ctx ends.
func (w *workload) startRuntime(ctx context.Context, wg *sync.WaitGroup) error {
	var src worker.Source
	if w.mode == delivery.Relay {
		rl, err := relay.New(w.pool, &demoPublisher{w: w, inner: w.queue}, &relay.Config{
			ID: "demo-relay", Logger: w.log, Metrics: w.metrics, Repo: w.repo,
			PollInterval: demoPollInterval, BackoffBase: demoDispatchBase, BackoffCap: demoDispatchCap,
			MaxDispatchAttempts: demoMaxDispatch, VisibilityTimeout: demoVisibility,
			LockDuration: demoLockDuration, PublishTimeout: demoPublishTimeout,
		})
		if err != nil {
			return err
		}
		wg.Go(func() { _ = rl.Run(ctx) })
		src = &crashingSource{w: w, inner: w.queue}
	}
	for i := range demoWorkers {
		if w.mode != delivery.Relay {
			// A source per worker: it leases for that worker's slots.
			ps, err := pgsource.New(w.pool, &pgsource.Config{Logger: w.log, Metrics: w.metrics, Repo: w.repo, PollInterval: demoPollInterval})
			if err != nil {
				return err
			}
			src = newCrashingLeasingSource(w, ps)
		}
		wk, err := worker.New(w.pool, src, w, &worker.Config{
			ID: fmt.Sprintf("demo-worker-%d", i+1), Concurrency: demoWorkerConcurrency, LeaseDuration: demoLease,
			RetryBackoffBase: demoRetryBase, RetryBackoffCap: demoRetryCap, Logger: w.log, Metrics: w.metrics, Repo: w.repo,
		})
		if err != nil {
			return err
		}
		wg.Go(func() { _ = wk.Run(ctx) })
	}
	return nil
}

// startProducers starts demoProducers goroutines that share out the
// entries, start each one (paced so the starts spread over
// demoStartSpread) and run its control-plane action in a goroutine of its
// own; errors go to errs. The channel returned is closed once every start
// and every action has returned.
func (w *workload) startProducers(ctx context.Context, errs chan<- error) <-chan struct{} {
	var producers, controls sync.WaitGroup
	pace := min(demoStartSpread/time.Duration(max(1, len(w.entries)/demoProducers)), 50*time.Millisecond)
	for p := range demoProducers {
		producers.Go(func() {
			for i := p; i < len(w.entries); i += demoProducers {
				if ctx.Err() != nil {
					return
				}
				e := w.entries[i]
				if err := w.start(ctx, e); err != nil {
					errs <- err
					return
				}
				controls.Go(func() {
					if err := w.control(ctx, e); err != nil && ctx.Err() == nil {
						errs <- fmt.Errorf("control plane, attempt %d (%s): %w", e.idx, e.sc.name, err)
					}
				})
				_ = sleepCtx(ctx, pace)
			}
		})
	}
	allIssued := make(chan struct{})
	go func() { producers.Wait(); controls.Wait(); close(allIssued) }()
	return allIssued
}

// awaitSettled polls the run states every demoSettlePoll, printing a
// progress line every demoProgressEvery and once settled, until
// allIssued is closed and the attempts are settled. It returns the first
// error from errs, and fails when ctx ends or when nothing moved (no
// attempt started, no state count changed) for stall.
func (w *workload) awaitSettled(ctx context.Context, stall time.Duration, errs <-chan error, allIssued <-chan struct{}) error {
	tick := time.NewTicker(demoSettlePoll)
	defer tick.Stop()
	lastPrint := time.Now()
	issued := false
	var lastProgress string
	lastMoved := time.Now()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case err := <-errs:
			return err
		case <-allIssued:
			issued = true
			allIssued = nil
			continue
		case <-tick.C:
		}
		counts, err := w.stateCounts(ctx)
		if err != nil {
			return fmt.Errorf("count attempts: %w", err)
		}
		if progress := fmt.Sprint(w.started.Load(), counts); progress != lastProgress {
			lastProgress, lastMoved = progress, time.Now()
		} else if time.Since(lastMoved) > stall {
			return fmt.Errorf("workload stalled: no attempt started or changed state for %s: %s", stall, w.progressLine(counts))
		}
		settled := issued && w.settled(counts)
		if settled || time.Since(lastPrint) >= demoProgressEvery {
			fmt.Fprintln(w.out, w.progressLine(counts))
			lastPrint = time.Now()
		}
		if settled {
			return nil
		}
	}
}

// settled reports whether every entry was started and counts holds all of
// them, none in a live state.
func (w *workload) settled(counts map[kfstype.RunState]int) bool {
	if int(w.started.Load()) != len(w.entries) {
		return false
	}
	total := 0
	for s, n := range counts {
		total += n
		if s.Live() && n > 0 {
			return false
		}
	}
	return total == len(w.entries)
}
