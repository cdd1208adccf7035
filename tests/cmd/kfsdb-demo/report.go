package main

import (
	"context"
	"fmt"
	"io"
	"sort"
	"strings"
	"text/tabwriter"

	"github.com/google/uuid"

	"github.com/knowledgefs/kfsdb/bench/kfsdb-bench/delivery"
	"github.com/knowledgefs/kfsdb/kfstype"
	"github.com/knowledgefs/kfsdb/observe"
)

// Names of the end-of-run checks.
const (
	checkAllTerminal   = "every started attempt is in the database, terminal, with no live slot"
	checkOutcomes      = "every attempt ended in its scenario's state and error code (and execution count)"
	checkOutboxPairing = "every attempt has exactly one outbox row, in the status its run state requires"
	checkOutboxIdle    = "no outbox row is left dispatching or leased"
	checkNoRunning     = "no attempt is left running"
	checkLeaseHeld     = "handlers only ran on attempts running under their own unexpired lease"
	checkNoOverlap     = "no two handler executions of one attempt overlapped"
	checkCandidates    = "every succeeded attempt bound its own candidate publication"
	checkDoomedWorker  = "the doomed worker held its lease until it died"
	checkMetrics       = "runtime counters agree with the scenarios"
)

// outcome is one attempt as stored at the end.
type outcome struct {
	state      kfstype.RunState
	code       string
	exec       int32
	checkpoint kfstype.Checkpoint
	candidate  *uuid.UUID
	outboxes   int
	outbox     string
}

func (w *workload) readOutcomes(ctx context.Context) (map[uuid.UUID]*outcome, error) {
	rows, err := w.pool.Query(ctx, `
		SELECT a.id, a.run_state, coalesce(a.last_error_code, ''), a.execution_attempts, a.checkpoint,
		       a.candidate_publication_id,
		       (SELECT count(*) FROM document_compilation_outbox o WHERE o.attempt_id = a.id),
		       coalesce((SELECT string_agg(o.status, ',') FROM document_compilation_outbox o WHERE o.attempt_id = a.id), '')
		  FROM document_compilation_attempts a`)
	if err != nil {
		return nil, fmt.Errorf("read outcomes: %w", err)
	}
	out := map[uuid.UUID]*outcome{}
	for rows.Next() {
		var id uuid.UUID
		o := &outcome{}
		if err := rows.Scan(&id, &o.state, &o.code, &o.exec, &o.checkpoint, &o.candidate, &o.outboxes, &o.outbox); err != nil {
			return nil, fmt.Errorf("read outcomes: %w", err)
		}
		out[id] = o
	}
	return out, rows.Err()
}

// wantOutbox is the terminal outbox status of each terminal run state.
var wantOutbox = map[kfstype.RunState]kfstype.OutboxStatus{
	kfstype.RunStateSucceeded:  kfstype.OutboxStatusCompleted,
	kfstype.RunStateFailed:     kfstype.OutboxStatusDead,
	kfstype.RunStateCanceled:   kfstype.OutboxStatusCanceled,
	kfstype.RunStateSuperseded: kfstype.OutboxStatusCanceled,
}

// report prints the outcome table, counters, queue stats and latencies,
// runs the end-of-run checks and returns how many failed.
func (w *workload) report(ctx context.Context) (int, error) {
	outcomes, err := w.readOutcomes(ctx)
	if err != nil {
		return 0, err
	}
	if err := w.checkLeftovers(ctx, len(outcomes)); err != nil {
		return 0, err
	}
	aggs := w.tallyOutcomes(outcomes)
	w.printOutcomes(aggs)
	w.checkCounters(aggs)
	w.printRuntime()
	return w.printChecks(), nil
}

// checkLeftovers checks that no outbox row is left dispatching or leased,
// no attempt running or holding a live slot, and that the database has
// as many attempts (n) as were started.
func (w *workload) checkLeftovers(ctx context.Context, n int) error {
	var idle, live, running int
	if err := w.pool.QueryRow(ctx, `SELECT
		(SELECT count(*) FROM document_compilation_outbox WHERE status IN ('dispatching', 'leased')),
		(SELECT count(*) FROM document_compilation_attempts WHERE active_slot IS NOT NULL),
		(SELECT count(*) FROM document_compilation_attempts WHERE run_state = 'running')`).Scan(&idle, &live, &running); err != nil {
		return fmt.Errorf("read leftovers: %w", err)
	}
	if idle > 0 {
		w.violate(checkOutboxIdle, "%d outbox rows dispatching or leased", idle)
	}
	if running > 0 {
		w.violate(checkNoRunning, "%d attempts running", running)
	}
	if live > 0 {
		w.violate(checkAllTerminal, "%d attempts still hold a live slot", live)
	}
	if n != len(w.entries) {
		w.violate(checkAllTerminal, "%d attempts in the database, %d started", n, len(w.entries))
	}
	return nil
}

// scenarioAgg sums up the outcomes of one scenario's attempts.
type scenarioAgg struct {
	n                int
	states, codes    map[string]int
	minExec, maxExec int32
	ok               bool
}

// tallyOutcomes checks each entry's outcome and sums them up per
// scenario name.
func (w *workload) tallyOutcomes(outcomes map[uuid.UUID]*outcome) map[string]*scenarioAgg {
	aggs := map[string]*scenarioAgg{}
	for _, sc := range scenarios {
		aggs[sc.name] = &scenarioAgg{states: map[string]int{}, codes: map[string]int{}, minExec: 1 << 30, maxExec: -1, ok: true}
	}
	for _, e := range w.entries {
		a := aggs[e.sc.name]
		a.n++
		o := outcomes[e.attempt()]
		if o == nil {
			a.ok = false
			a.states["missing"]++
			w.violate(checkAllTerminal, "attempt %d (%s) %s not found", e.idx, e.sc.name, e.attempt())
			continue
		}
		a.states[string(o.state)]++
		if o.code != "" {
			a.codes[o.code]++
		}
		a.minExec, a.maxExec = min(a.minExec, o.exec), max(a.maxExec, o.exec)
		if !w.checkOutcome(e, o) {
			a.ok = false
		}
	}
	return aggs
}

// checkOutcome runs the end-of-run checks of one attempt and reports
// whether it ended as its scenario wants.
func (w *workload) checkOutcome(e *entry, o *outcome) bool {
	if !o.state.Terminal() {
		w.violate(checkAllTerminal, "attempt %d (%s) is %s", e.idx, e.sc.name, o.state)
	}
	bad := o.state != e.sc.wantState || (e.sc.wantCode != "" && o.code != e.sc.wantCode) ||
		(e.sc.checkExec && (o.exec < e.sc.minExec || o.exec > e.sc.maxExec))
	if bad {
		w.violate(checkOutcomes, "attempt %d (%s): %s/%s after %d executions, want %s/%s",
			e.idx, e.sc.name, o.state, orDash(o.code), o.exec, e.sc.wantState, orDash(e.sc.wantCode))
	}
	if want, ok := wantOutbox[o.state]; !ok || o.outboxes != 1 || o.outbox != string(want) {
		w.violate(checkOutboxPairing, "attempt %d (%s): %s with %d outbox rows (%s)", e.idx, e.sc.name, o.state, o.outboxes, o.outbox)
	}
	if o.state == kfstype.RunStateSucceeded && (o.candidate == nil || *o.candidate != e.pubID || o.checkpoint != kfstype.CheckpointPublished) {
		w.violate(checkCandidates, "attempt %d (%s): checkpoint %s, candidate %v", e.idx, e.sc.name, o.checkpoint, o.candidate)
	}
	if e.sc.name == scWorkerCrash && e.crash.Load() != 2 {
		w.violate(checkDoomedWorker, "attempt %d: the doomed worker never got it", e.idx)
	}
	return !bad
}

// printOutcomes prints the outcome table and what each scenario does.
func (w *workload) printOutcomes(aggs map[string]*scenarioAgg) {
	out := w.out
	fmt.Fprintln(out, "\nOUTCOMES (expected vs actual terminal state per scenario)")
	tw := newTable(out)
	fmt.Fprintln(tw, "SCENARIO\tN\tEXPECTED\tACTUAL\tERROR CODES\tEXEC\tRESULT\t")
	for _, sc := range w.scenarios {
		a := aggs[sc.name]
		want := string(sc.wantState)
		if sc.wantCode != "" {
			want += "/" + sc.wantCode
		}
		exec := "-"
		if a.maxExec >= 0 {
			exec = fmt.Sprintf("%d", a.minExec)
			if a.maxExec != a.minExec {
				exec += fmt.Sprintf("-%d", a.maxExec)
			}
		}
		fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%s\t%s\t%s\t\n", sc.name, a.n, want, formatCounts(a.states), formatCounts(a.codes), exec, passFail(a.ok))
	}
	_ = tw.Flush()
	if len(w.skipped) > 0 {
		fmt.Fprintf(out, "(%s delivery: %s)\n", w.mode, w.skippedNote())
	}
	fmt.Fprintln(out, "\nSCENARIOS")
	for _, sc := range w.scenarios {
		fmt.Fprintf(out, "  %-22s %s\n", sc.name, sc.what)
	}
}

// checkCounters checks the runtime's own view, its counters, against the
// scenarios.
func (w *workload) checkCounters(aggs map[string]*scenarioAgg) {
	count := func(name string) int64 { return int64(aggs[name].n) }
	m := w.metrics
	for _, c := range []struct {
		counter observe.Counter
		want    int64
	}{
		{observe.Panicked, count(scPanic)},
		{observe.DeadLettered, count(scDeadLetter) + count(scDeadLetterRetry)},
		{observe.Exhausted, count(scExhausted)},
	} {
		if got := m.Get(c.counter); got != c.want {
			w.violate(checkMetrics, "%s = %d, want %d", c.counter, got, c.want)
		}
	}
	if got, want := m.Get(observe.Completed), count(scSuccess)+count(scRetryOnce)+count(scWorkerCrash)+count(scDeferredRelease)+count(scManualRetry)+count(scDeadLetterRetry); got != want {
		w.violate(checkMetrics, "%s = %d, want %d", observe.Completed, got, want)
	}
	if w.mode != delivery.Relay {
		// Every lease a fetch took ran a handler or died with the doomed
		// worker: none was handed back or lost on the way.
		if got, want := m.Get(observe.FetchedLeases), int64(w.handlerRuns()+w.deaths.Load()); got != want {
			w.violate(checkMetrics, "%s = %d, want %d (handler executions + leases the doomed worker abandoned)", observe.FetchedLeases, got, want)
		}
	}
}

// handlerRuns counts the handler's executions.
func (w *workload) handlerRuns() int32 {
	var n int32
	for _, e := range w.entries {
		n += e.executions.Load()
	}
	return n
}

// printRuntime prints the runtime counters, the queue's or the sources'
// and the handler's statistics and the latencies.
func (w *workload) printRuntime() {
	out := w.out
	fmt.Fprintln(out, "\nRUNTIME COUNTERS (observe.Counts)")
	tw := newTable(out)
	for _, c := range w.metrics.Snapshot() {
		fmt.Fprintf(tw, "%s\t%d\t\n", c.Counter, c.N)
	}
	_ = tw.Flush()
	runtime := "sources, workers, demo"
	if w.mode == delivery.Relay {
		pub, acked, retried := w.queue.Stats()
		fmt.Fprintf(out, "\nMEMQUEUE: published %d, acked %d, handed back %d, still queued %d (stale redeliveries, dropped at shutdown)\n",
			pub, acked, retried, w.queue.Len())
		runtime = "relay, workers, demo"
	} else {
		m := w.metrics
		fmt.Fprintf(out, "\nSOURCES: %d fetches leased %d attempts (%d failed as exhausted), %d leases handed back at shutdown, %d abandoned by the doomed worker\n",
			m.Get(observe.Fetches), m.Get(observe.FetchedLeases), m.Get(observe.FetchExhausted), m.Get(observe.LeasesHandedBack), w.deaths.Load())
	}
	fmt.Fprintf(out, "HANDLER: %d executions, %d lease checks at handler start\n", w.handlerRuns(), w.leaseChecks.Load())

	printLatencies(out, "STATEMENT LATENCY (pgx QueryTracer on the pool: "+runtime+")", w.lat.rows(latStatement))
	printLatencies(out, "REPO CALL LATENCY (calls the demo makes itself, including any explaining read)", w.lat.rows(latCall))
}

// printChecks prints each end-of-run check with up to five of its
// violations, and returns how many checks failed.
func (w *workload) printChecks() int {
	out := w.out
	fmt.Fprintln(out, "\nCHECKS")
	failed := 0
	w.violationsMu.Lock()
	defer w.violationsMu.Unlock()
	for _, check := range []string{checkAllTerminal, checkOutcomes, checkOutboxPairing, checkOutboxIdle, checkNoRunning,
		checkLeaseHeld, checkNoOverlap, checkCandidates, checkDoomedWorker, checkMetrics} {
		v := w.violations[check]
		fmt.Fprintf(out, "%s  %s\n", passFail(len(v) == 0), check)
		if len(v) > 0 {
			failed++
			for i, s := range v {
				if i == 5 {
					fmt.Fprintf(out, "        … and %d more\n", len(v)-5)
					break
				}
				fmt.Fprintf(out, "        %s\n", s)
			}
		}
	}
	return failed
}

func newTable(out io.Writer) *tabwriter.Writer { return tabwriter.NewWriter(out, 0, 4, 2, ' ', 0) }

func passFail(ok bool) string {
	if ok {
		return "PASS"
	}
	return "FAIL"
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// formatCounts prints a count map as "a=1 b=2", sorted; "-" when empty.
func formatCounts(m map[string]int) string {
	if len(m) == 0 {
		return "-"
	}
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("%s=%d", k, m[k])
	}
	return strings.Join(parts, " ")
}
