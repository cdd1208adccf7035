package model_test

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"

	"pgregory.net/rapid"

	"github.com/knowledgefs/kfsdb/repo"
	"github.com/knowledgefs/kfsdb/tests/pgtest"
)

// Sizes of a run, in sequences over all workers. CI runs ciChecks
// sequences of about ciSteps operations each; -model.soak runs soakChecks.
// KFS_MODEL_CHECKS wins over both. An explicit -rapid.checks (or
// RAPID_CHECKS) wins over all of them and counts per worker; -rapid.steps
// (or RAPID_STEPS) wins over ciSteps.
const (
	ciChecks     = 1000
	soakChecks   = 100000
	ciSteps      = 20
	modelWorkers = 2
)

// EnvChecks sets the number of sequences (a soak) unless -rapid.checks is
// given.
const EnvChecks = "KFS_MODEL_CHECKS"

var soak = flag.Bool("model.soak", false, fmt.Sprintf("model: run a long soak (%d sequences, or $%s; add -timeout 0)", soakChecks, EnvChecks))

func TestMain(m *testing.M) {
	flag.Parse()
	if err := configureRapid(); err != nil {
		fmt.Fprintf(os.Stderr, "model: %v\n", err)
		os.Exit(2)
	}
	pgtest.Main(m)
}

// configureRapid sets rapid's checks and steps flags from this package's
// sizes unless the command line or rapid's environment variables chose
// them.
func configureRapid() error {
	explicit := map[string]bool{}
	flag.Visit(func(f *flag.Flag) { explicit[f.Name] = true })
	if !explicit["rapid.checks"] {
		_, rapidEnv := os.LookupEnv("RAPID_CHECKS")
		checks := ciChecks
		switch env := os.Getenv(EnvChecks); {
		case env != "":
			n, err := strconv.Atoi(env)
			if err != nil || n < 1 {
				return fmt.Errorf("%s=%q: want a positive number of sequences", EnvChecks, env)
			}
			checks = n
		case *soak:
			checks = soakChecks
		case rapidEnv:
			checks = 0 // keep RAPID_CHECKS
		}
		if checks > 0 {
			perWorker := (checks + modelWorkers - 1) / modelWorkers
			if err := flag.Set("rapid.checks", strconv.Itoa(perWorker)); err != nil {
				return err
			}
		}
	}
	if _, rapidEnv := os.LookupEnv("RAPID_STEPS"); !explicit["rapid.steps"] && !rapidEnv {
		if err := flag.Set("rapid.steps", strconv.Itoa(ciSteps)); err != nil {
			return err
		}
	}
	return nil
}

// errClass is a call's outcome: "ok" or the one sentinel its error matches.
type errClass string

const (
	clsOK                errClass = "ok"
	clsNotFound          errClass = "NotFound"
	clsStaleRowVersion   errClass = "StaleRowVersion"
	clsLeaseLost         errClass = "LeaseLost"
	clsDeliveryMismatch  errClass = "DeliveryMismatch"
	clsDeliveryPending   errClass = "DeliveryPending"
	clsInvalidTransition errClass = "InvalidTransition"
	clsAttemptsExhausted errClass = "AttemptsExhausted"
	clsCandidateRejected errClass = "CandidateRejected"
	clsLiveAttemptExists errClass = "LiveAttemptExists"
	clsHeadConflict      errClass = "HeadConflict"
	clsOutboxLockLost    errClass = "OutboxLockLost"
	clsInvalidInput      errClass = "InvalidInput"
)

var sentinels = []struct {
	cls errClass
	err error
}{
	{clsNotFound, repo.ErrNotFound},
	{clsStaleRowVersion, repo.ErrStaleRowVersion},
	{clsLeaseLost, repo.ErrLeaseLost},
	{clsDeliveryMismatch, repo.ErrDeliveryMismatch},
	{clsDeliveryPending, repo.ErrDeliveryPending},
	{clsInvalidTransition, repo.ErrInvalidTransition},
	{clsAttemptsExhausted, repo.ErrAttemptsExhausted},
	{clsCandidateRejected, repo.ErrCandidateRejected},
	{clsLiveAttemptExists, repo.ErrLiveAttemptExists},
	{clsHeadConflict, repo.ErrHeadConflict},
	{clsOutboxLockLost, repo.ErrOutboxLockLost},
	{clsInvalidInput, repo.ErrInvalidInput},
}

// classify returns err's class; an error that matches no sentinel, or more
// than one, is itself an error (the repo promises exactly one).
func classify(err error) (errClass, error) {
	if err == nil {
		return clsOK, nil
	}
	var found []errClass
	for _, s := range sentinels {
		if errors.Is(err, s.err) {
			found = append(found, s.cls)
		}
	}
	if len(found) != 1 {
		return "", fmt.Errorf("error matches %d sentinels %v: %w", len(found), found, err)
	}
	return found[0], nil
}

// stats counts what the sequences did, for the final log line. Shrinking
// (only after a failure) replays sequences and counts them again.
type stats struct {
	mu        sync.Mutex
	sequences int
	steps     int
	ops       map[string]map[errClass]int
	rowCounts map[string][2]int
}

func newStats() *stats { return &stats{ops: map[string]map[errClass]int{}} }

func (s *stats) sequence() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.sequences++
}

func (s *stats) op(kind string, cls errClass) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ops[kind] == nil {
		s.ops[kind] = map[errClass]int{}
	}
	s.ops[kind][cls]++
	s.steps++
}

// rows counts the rows of a batch call marked and refused (refusals are
// per row, not an error of the call).
func (s *stats) rows(kind string, marked, refused int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.rowCounts == nil {
		s.rowCounts = map[string][2]int{}
	}
	c := s.rowCounts[kind]
	s.rowCounts[kind] = [2]int{c[0] + marked, c[1] + refused}
}

// report is a multi-line summary: totals, then per operation kind the
// applied and refused counts and the refusals by class.
func (s *stats) report() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	kinds := make([]string, 0, len(s.ops))
	applied, refused := 0, 0
	for k, m := range s.ops {
		kinds = append(kinds, k)
		for c, n := range m {
			if c == clsOK {
				applied += n
			} else {
				refused += n
			}
		}
	}
	sort.Strings(kinds)
	var b strings.Builder
	fmt.Fprintf(&b, "sequences=%d operations=%d applied=%d refused=%d\n", s.sequences, s.steps, applied, refused)
	for _, k := range kinds {
		m := s.ops[k]
		total := 0
		classes := make([]string, 0, len(m))
		for c, n := range m {
			total += n
			if c != clsOK {
				classes = append(classes, fmt.Sprintf("%s=%d", c, n))
			}
		}
		sort.Strings(classes)
		fmt.Fprintf(&b, "  %-16s total=%-6d applied=%-6d refused=%-6d %s\n", k, total, m[clsOK], total-m[clsOK], strings.Join(classes, " "))
	}
	rowKinds := make([]string, 0, len(s.rowCounts))
	for k := range s.rowCounts {
		rowKinds = append(rowKinds, k)
	}
	sort.Strings(rowKinds)
	for _, k := range rowKinds {
		c := s.rowCounts[k]
		fmt.Fprintf(&b, "  %s: %d", k, c[0])
		if c[1] > 0 {
			fmt.Fprintf(&b, ", refused %d", c[1])
		}
		b.WriteString("\n")
	}
	return b.String()
}

// rapidTB lets testfactory's testing.TB helpers fail the current rapid
// check (so rapid shrinks the sequence) instead of the outer test.
type rapidTB struct {
	testing.TB
	rt *rapid.T
}

func (r rapidTB) Helper()                      {}
func (r rapidTB) Error(args ...any)            { r.rt.Error(args...) }
func (r rapidTB) Errorf(f string, args ...any) { r.rt.Errorf(f, args...) }
func (r rapidTB) Fail()                        { r.rt.Fail() }
func (r rapidTB) FailNow()                     { r.rt.FailNow() }
func (r rapidTB) Failed() bool                 { return r.rt.Failed() }
func (r rapidTB) Fatal(args ...any)            { r.rt.Fatal(args...) }
func (r rapidTB) Fatalf(f string, args ...any) { r.rt.Fatalf(f, args...) }
func (r rapidTB) Log(args ...any)              { r.rt.Log(args...) }
func (r rapidTB) Logf(f string, args ...any)   { r.rt.Logf(f, args...) }
func (r rapidTB) Skip(args ...any)             { r.rt.Skip(args...) }
func (r rapidTB) SkipNow()                     { r.rt.SkipNow() }
func (r rapidTB) Skipf(f string, args ...any)  { r.rt.Skipf(f, args...) }
func (r rapidTB) Cleanup(f func())             { r.rt.Cleanup(f) }
