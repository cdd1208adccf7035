package main

import (
	"math"
	"math/rand/v2"
	"sync"
	"sync/atomic"

	"github.com/google/uuid"

	"github.com/knowledgefs/kfsdb/bench/kfsdb-bench/delivery"
	"github.com/knowledgefs/kfsdb/kfstype"
)

// scenario is one behaviour of the demo workload. Each attempt follows
// exactly one, chosen deterministically from --attempts and --seed.
type scenario struct {
	// name labels the scenario in the outcome table.
	name string
	// what says in a few words what happens to its attempts.
	what string
	// share is the fraction of attempts (at least one each); success takes
	// the rest.
	share float64
	// wantState and wantCode are the terminal state and last_error_code
	// every attempt of the scenario must end with; wantCode "" is not
	// checked (succeeded attempts may keep a retry's code).
	wantState kfstype.RunState
	wantCode  string
	// minExec and maxExec bound execution_attempts at the end when
	// checkExec is set.
	checkExec        bool
	minExec, maxExec int32
	// maxAttempts is Start's MaxExecutionAttempts (0: the default, 5).
	maxAttempts int32
	// inTx starts the attempt in a transaction with its document asset
	// (the outbox pattern); scenarios that route by attempt id need it, so
	// that the id is known before the relay can see the row.
	inTx bool
	// deferred starts it parked (available_at = infinity).
	deferred bool
	// relayOnly: the scenario exists because of a broker (the relay's
	// publisher rejects it), so postgres delivery, which has none, leaves
	// it out and success takes its share.
	relayOnly bool
}

// Scenario names.
const (
	scSuccess          = "success"
	scRetryOnce        = "retry_once"
	scWorkerCrash      = "worker_crash"
	scDeferredRelease  = "deferred_release"
	scManualRetry      = "fatal_then_retry"
	scDeadLetterRetry  = "dead_letter_then_retry"
	scFatal            = "fatal"
	scPanic            = "panic"
	scExhausted        = "exhausted"
	scDeadLetter       = "dead_letter"
	scCancelRunning    = "cancel_running"
	scCancelDeferred   = "cancel_deferred"
	scSupersedeRunning = "supersede_running"
)

// scenarios in table order.
var scenarios = []*scenario{
	{name: scSuccess, what: "walk every checkpoint, bind the candidate, complete",
		wantState: kfstype.RunStateSucceeded},
	{name: scRetryOnce, what: "retryable error on the 1st execution, then success", share: 0.08,
		wantState: kfstype.RunStateSucceeded, checkExec: true, minExec: 2, maxExec: 5},
	{name: scWorkerCrash, what: "a worker leases it, advances, dies; it runs again after the lease expires", share: 0.03,
		wantState: kfstype.RunStateSucceeded, checkExec: true, minExec: 2, maxExec: 5, inTx: true},
	{name: scDeferredRelease, what: "deferred start, ReleaseDeferred 0.5 s later, success", share: 0.02,
		wantState: kfstype.RunStateSucceeded, deferred: true},
	{name: scManualRetry, what: "fatal error, then RetryFailed from the control plane, success", share: 0.03,
		wantState: kfstype.RunStateSucceeded},
	{name: scDeadLetterRetry, what: "publisher rejects it until dead, then RetryFailed, success", share: 0.02,
		wantState: kfstype.RunStateSucceeded, inTx: true, relayOnly: true},
	{name: scFatal, what: "handler returns worker.Fatal", share: 0.04,
		wantState: kfstype.RunStateFailed, wantCode: kfstype.ErrorCodeCompilationFailed, checkExec: true, minExec: 1, maxExec: 1},
	{name: scPanic, what: "handler panics", share: 0.03,
		wantState: kfstype.RunStateFailed, wantCode: kfstype.ErrorCodeHandlerPanic, checkExec: true, minExec: 1, maxExec: 1},
	{name: scExhausted, what: "always retryable, MaxExecutionAttempts 2", share: 0.03,
		wantState: kfstype.RunStateFailed, wantCode: kfstype.ErrorCodeExecutionAttemptsExhausted, checkExec: true, minExec: 2, maxExec: 2, maxAttempts: 2},
	{name: scDeadLetter, what: "publisher always rejects it: dead-lettered", share: 0.02,
		wantState: kfstype.RunStateFailed, wantCode: kfstype.ErrorCodeOutboxDead, checkExec: true, minExec: 0, maxExec: 0, inTx: true, relayOnly: true},
	{name: scCancelRunning, what: "Cancel while a handler holds the lease", share: 0.03,
		wantState: kfstype.RunStateCanceled, wantCode: kfstype.ErrorCodeCanceled, checkExec: true, minExec: 1, maxExec: 1},
	{name: scCancelDeferred, what: "deferred start, Cancel before it is ever published", share: 0.02,
		wantState: kfstype.RunStateCanceled, wantCode: kfstype.ErrorCodeCanceled, checkExec: true, minExec: 0, maxExec: 0, deferred: true},
	{name: scSupersedeRunning, what: "Supersede while a handler holds the lease", share: 0.03,
		wantState: kfstype.RunStateSuperseded, wantCode: kfstype.ErrorCodeSuperseded, checkExec: true, minExec: 1, maxExec: 1},
}

// minDemoAttempts gives every scenario at least one attempt and success
// the majority of a small run.
const minDemoAttempts = 2 * 13

// entry is one attempt of the workload and what the demo knows about it.
type entry struct {
	idx         int
	sc          *scenario
	tenantID    string
	spaceID     uuid.UUID
	assetID     uuid.UUID
	pubID       uuid.UUID
	fingerprint string

	// attemptID is set by the producer before the attempt is visible to
	// the relay for inTx scenarios, right after Start otherwise.
	attemptID atomic.Pointer[uuid.UUID]
	// handlerStarted is closed when a handler reaches the point where the
	// control plane cancels or supersedes it; ended when that is done.
	handlerStarted chan struct{}
	startedOnce    sync.Once
	ended          chan struct{}
	// executions counts handler runs; active detects overlapping ones.
	executions atomic.Int32
	active     atomic.Int32
	// retried is set just before the control plane calls RetryFailed.
	retried atomic.Bool
	// crash: 0 not yet, 1 a doomed worker is taking it, 2 it died.
	crash atomic.Int32
	// rejected counts publications the demo's publisher refused.
	rejected atomic.Int32
}

func (e *entry) attempt() uuid.UUID {
	if p := e.attemptID.Load(); p != nil {
		return *p
	}
	return uuid.Nil
}

// scenariosFor returns the scenarios a delivery mode runs, in table
// order, and the names of those it skips (relay-only ones under postgres
// delivery).
func scenariosFor(mode delivery.Mode) (run []*scenario, skipped []string) {
	for _, sc := range scenarios {
		if sc.relayOnly && mode != delivery.Relay {
			skipped = append(skipped, sc.name)
			continue
		}
		run = append(run, sc)
	}
	return run, skipped
}

// planScenarios assigns one of active (success first) to each of n
// attempts: every scenario but success gets round(share·n) (at least one),
// success the rest, in an order shuffled by seed.
func planScenarios(active []*scenario, n int, seed uint64) []*scenario {
	var plan []*scenario
	for _, sc := range active[1:] {
		k := max(1, int(math.Round(sc.share*float64(n))))
		for range k {
			plan = append(plan, sc)
		}
	}
	for len(plan) < n {
		plan = append(plan, active[0])
	}
	rng := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	rng.Shuffle(len(plan), func(i, j int) { plan[i], plan[j] = plan[j], plan[i] })
	return plan
}
