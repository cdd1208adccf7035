package faultload

import (
	"fmt"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/knowledgefs/kfsdb/kfstype"
	"github.com/knowledgefs/kfsdb/tests/testfactory"
)

// Report is what a run did and what the checks found. Counts of things
// that must not happen come with examples (…Examples, Problems).
type Report struct {
	Path     Path
	Duration time.Duration

	// Attempts counts the documents whose Start returned success (upfront
	// and produced; a retry that found the first try's attempt counts).
	Attempts int
	// InTx counts those started inside the app's own transaction.
	InTx int
	// Terminal counts the started attempts by their final run state.
	Terminal map[kfstype.RunState]int
	// Missing: Start returned success but the attempt is not in the
	// database. NotTerminal: it is there but still live when the drain
	// ended. Lost is their sum.
	Missing, NotTerminal, Lost int
	// StartErrors counts the documents some Start call for which returned
	// an error; StartErrorOutcome says what each came to: "exists_once",
	// "absent" or "duplicated".
	StartErrors       int
	StartErrorOutcome map[string]int
	// StartsGaveUp counts the documents no Start succeeded for within
	// StartRetryFor (or before the run stopped); NotProduced, those the
	// producers never got to.
	StartsGaveUp, NotProduced int
	// Duplicated counts document versions with more than one attempt.
	Duplicated int
	// CompletedTwice counts attempts whose completion was acknowledged to
	// workers more than once.
	CompletedTwice int
	// Leases counts the leases granted; OverlappingLeases, the pairs of
	// one attempt's leases that were valid at once.
	Leases, OverlappingLeases int
	// FencedWrites counts the writes made under a lease; UnfencedWrites,
	// those made at or after the lease's expiry.
	FencedWrites   testfactory.FencedWrites
	UnfencedWrites int
	// InvariantViolations counts the attempts whose rows break the
	// pairing invariants (testfactory.CheckInvariants), a missing outbox
	// row among them.
	InvariantViolations int
	// AppWriteMismatches counts in-transaction documents whose app write
	// and attempt did not commit together (one without the other).
	AppWriteMismatches int

	// Faults are the MarkFault calls, with the RTO after each and what
	// was in flight.
	Faults []Fault
	// RTOStart and RTOComplete are those of the last fault; -1 when
	// nothing succeeded after it (or there was no fault).
	RTOStart, RTOComplete time.Duration

	// Transient counts the retryable errors the run's own calls saw.
	Transient int64
	// NonRetryable are the errors the run's own calls saw that
	// repo.IsRetryable rejects; ReadAsState, retryable ones matching a
	// state sentinel. A connection error must be neither.
	NonRetryable, ReadAsState examples
	// RuntimeTransient counts the retryable errors the runtime (workers,
	// sources, relay) logged; RuntimeNonRetryable, the logged errors that
	// repo.IsRetryable rejects and that report no state (lease lost,
	// stale delivery, …) nor the run's own stop.
	RuntimeTransient    int64
	RuntimeNonRetryable examples
	// LeasesLost, Retried, Stale are the runtime's counts; HandlersStopped
	// counts handlers stopped by the loss of their lease.
	LeasesLost, Retried, Stale, HandlersStopped int64
	// ProbeCalls counts the probe's questions; ProbeWrong, its wrong
	// answers.
	ProbeCalls int64
	ProbeWrong examples

	// Problems holds an example of each failed check, the run's own
	// failures (a drain that stalled, a worker that returned an error, a
	// check that could not read) among them.
	Problems examples
}

// Fault is one MarkFault.
type Fault struct {
	Name string
	At   time.Time
	// RTOStart is the time from the fault to the first success of a
	// Start called after it; RTOComplete, to the first completion
	// acknowledged to a worker of a delivery taken after it (a call made
	// before the fault may have committed before it and returned just
	// after, which says nothing of recovery). -1: none.
	RTOStart, RTOComplete time.Duration
	// InFlight says what became of what was in flight at the fault:
	// "start/exists_once", "start/absent", "start/duplicated" for the
	// Starts running, "attempt/<run state>" or "attempt/missing" for the
	// attempts started and not yet completed, and "attempt/completed_twice".
	InFlight map[string]int
}

// Summary is the one-line result, sync as the caller names the
// replication mode:
//
//	failover: path=P sync=S attempts=N lost=L completed_twice=D overlapping_leases=O rto_start_ms=X rto_complete_ms=Y
func (r *Report) Summary(sync string) string {
	return fmt.Sprintf("failover: path=%s sync=%s attempts=%d lost=%d completed_twice=%d overlapping_leases=%d rto_start_ms=%d rto_complete_ms=%d",
		r.Path, sync, r.Attempts, r.Lost, r.CompletedTwice, r.OverlappingLeases, ms(r.RTOStart), ms(r.RTOComplete))
}

func ms(d time.Duration) int64 {
	if d < 0 {
		return -1
	}
	return d.Milliseconds()
}

// Failures lists what breaks the strict expectation, that of a run whose
// faults lose nothing (every fault but an asynchronous failover): every
// attempt started succeeded exactly once, nothing lost, doubled or
// overlapping, every write fenced, every row consistent, every error a
// retryable connection error, every probe answer right. None: the run is
// clean.
func (r *Report) Failures() []string {
	var out []string
	add := func(bad bool, format string, args ...any) {
		if bad {
			out = append(out, fmt.Sprintf(format, args...))
		}
	}
	notSucceeded := 0
	for s, n := range r.Terminal {
		if s != kfstype.RunStateSucceeded {
			notSucceeded += n
		}
	}
	add(r.Lost > 0, "lost=%d (missing %d, not terminal %d)", r.Lost, r.Missing, r.NotTerminal)
	add(notSucceeded > 0, "%d attempts ended other than succeeded: %v", notSucceeded, r.Terminal)
	add(r.StartErrorOutcome["duplicated"] > 0 || r.Duplicated > 0, "duplicated: %d document versions with more than one attempt", r.Duplicated)
	add(r.StartsGaveUp > 0 || r.NotProduced > 0, "starts given up %d, never made %d", r.StartsGaveUp, r.NotProduced)
	add(r.CompletedTwice > 0, "completed_twice=%d", r.CompletedTwice)
	add(r.OverlappingLeases > 0, "overlapping_leases=%d", r.OverlappingLeases)
	add(r.UnfencedWrites > 0, "%d writes under an expired lease", r.UnfencedWrites)
	add(r.InvariantViolations > 0, "%d attempts break the invariants", r.InvariantViolations)
	add(r.AppWriteMismatches > 0, "%d app writes and attempts not committed together", r.AppWriteMismatches)
	add(r.NonRetryable.N > 0, "%d errors not repo.IsRetryable: %v", r.NonRetryable.N, r.NonRetryable.First)
	add(r.RuntimeNonRetryable.N > 0, "the runtime logged %d errors not repo.IsRetryable: %v", r.RuntimeNonRetryable.N, r.RuntimeNonRetryable.First)
	add(r.ReadAsState.N > 0, "%d transient errors read as a state: %v", r.ReadAsState.N, r.ReadAsState.First)
	add(r.ProbeWrong.N > 0, "%d wrong probe answers: %v", r.ProbeWrong.N, r.ProbeWrong.First)
	add(r.Problems.N > 0, "%d problems: %s", r.Problems.N, strings.Join(r.Problems.First, "; "))
	return out
}

// Require fails t unless Failures is empty.
func (r *Report) Require(t testing.TB) {
	t.Helper()
	require.Empty(t, r.Failures(), "%s run: %s", r.Path, r)
}

// String is the report for a test log.
func (r *Report) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "path=%s attempts=%d (in tx %d) duration=%s terminal=%s lost=%d (missing %d, not terminal %d); "+
		"starts that errored=%d %s, given up %d, never made %d; duplicated=%d completed_twice=%d; "+
		"leases=%d overlapping=%d; fenced writes=%d heartbeats/advances + %d outcomes, %d after expiry; invariant violations=%d; app write mismatches=%d; "+
		"leases lost=%d handlers stopped by lease loss=%d retries=%d stale deliveries=%d; transient errors=%d, not retryable %d, read as a state %d; "+
		"runtime logged transient errors=%d, not retryable %d; probe calls=%d wrong %d",
		r.Path, r.Attempts, r.InTx, r.Duration.Round(100*time.Millisecond), states(r.Terminal), r.Lost, r.Missing, r.NotTerminal,
		r.StartErrors, counts(r.StartErrorOutcome), r.StartsGaveUp, r.NotProduced, r.Duplicated, r.CompletedTwice,
		r.Leases, r.OverlappingLeases, r.FencedWrites.KeptToken, r.FencedWrites.Outcomes, r.UnfencedWrites, r.InvariantViolations, r.AppWriteMismatches,
		r.LeasesLost, r.HandlersStopped, r.Retried, r.Stale, r.Transient, r.NonRetryable.N, r.ReadAsState.N,
		r.RuntimeTransient, r.RuntimeNonRetryable.N, r.ProbeCalls, r.ProbeWrong.N)
	if r.RuntimeNonRetryable.N > 0 {
		fmt.Fprintf(&b, "; runtime errors not retryable: %s", strings.Join(r.RuntimeNonRetryable.First, "; "))
	}
	for _, f := range r.Faults {
		fmt.Fprintf(&b, "; fault %q: rto_start_ms=%d rto_complete_ms=%d in flight %s", f.Name, ms(f.RTOStart), ms(f.RTOComplete), counts(f.InFlight))
	}
	if r.Problems.N > 0 {
		fmt.Fprintf(&b, "; problems (%d): %s", r.Problems.N, strings.Join(r.Problems.First, "; "))
	}
	return b.String()
}

func states(m map[kfstype.RunState]int) string {
	c := map[string]int{}
	for s, n := range m {
		c[string(s)] = n
	}
	return counts(c)
}

// counts formats a map as {a:1 b:2}, keys sorted.
func counts(m map[string]int) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("%s:%d", k, m[k])
	}
	return "{" + strings.Join(parts, " ") + "}"
}
