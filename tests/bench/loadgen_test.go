package bench

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/knowledgefs/kfsdb/tests/loadgen"
)

// TestLoadgen runs the lifecycle load driver when KFS_LOADGEN=1, with
// LOADGEN_SECONDS (10), LOADGEN_PRODUCERS (8) and LOADGEN_WORKERS (8,
// comma-separated for several runs) and LOADGEN_STEPS (1: the handler
// writes every checkpoint; default 0: it completes through them in one
// write), LOADGEN_ASYNC (1: repo.Config.AsyncProgressCommits for the
// relay and worker) and LOADGEN_SINGLE_COMPLETIONS (1: each slot completes
// its own attempt), and logs its tables.
func TestLoadgen(t *testing.T) {
	if os.Getenv("KFS_LOADGEN") != "1" {
		t.Skip("set KFS_LOADGEN=1 (make loadgen)")
	}
	requireEnv(t)
	secs := envInt(t, "LOADGEN_SECONDS", 10)
	producers := envInt(t, "LOADGEN_PRODUCERS", 8)
	workers := []int{8}
	if s := os.Getenv("LOADGEN_WORKERS"); s != "" {
		workers = nil
		for _, f := range strings.Split(s, ",") {
			n, err := strconv.Atoi(strings.TrimSpace(f))
			if err != nil || n < 1 {
				t.Fatalf("LOADGEN_WORKERS=%q", s)
			}
			workers = append(workers, n)
		}
	}
	steps := os.Getenv("LOADGEN_STEPS") == "1"
	async := os.Getenv("LOADGEN_ASYNC") == "1"
	single := os.Getenv("LOADGEN_SINGLE_COMPLETIONS") == "1"
	for _, w := range workers {
		res, err := loadgen.Run(context.Background(), &loadgen.Config{
			DatabaseURL: env.url, Duration: time.Duration(secs) * time.Second, Producers: producers, Workers: w,
			StepCheckpoints: steps, AsyncProgressCommits: async, SingleCompletions: single,
		})
		if err != nil {
			t.Fatal(err)
		}
		var sb strings.Builder
		res.WriteTable(&sb)
		t.Logf("loadgen producers=%d workers=%d steps=%v async=%v single-completions=%v:\n%s", producers, w, steps, async, single, sb.String())
	}
}

func envInt(t *testing.T, name string, def int) int {
	t.Helper()
	s := os.Getenv(name)
	if s == "" {
		return def
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 1 {
		t.Fatalf("%s=%q: want an integer > 0", name, s)
	}
	return n
}

// TestLongTransaction measures, when KFS_LOADGEN=1, the same load twice in
// one run: alone, and while another session holds a REPEATABLE READ
// snapshot open for the whole run. It reports throughput and dead tuples
// side by side; it asserts nothing about them (a measurement, not a
// timing test).
func TestLongTransaction(t *testing.T) {
	if os.Getenv("KFS_LOADGEN") != "1" {
		t.Skip("set KFS_LOADGEN=1 (make loadgen-longtx)")
	}
	requireEnv(t)
	secs := envInt(t, "LOADGEN_SECONDS", 10)
	var sb strings.Builder
	for _, hold := range []bool{false, true} {
		res, err := loadgen.Run(context.Background(), &loadgen.Config{
			DatabaseURL: env.url, Duration: time.Duration(secs) * time.Second, HoldSnapshot: hold,
		})
		if err != nil {
			t.Fatal(err)
		}
		a, o := res.Tables["document_compilation_attempts"], res.Tables["document_compilation_outbox"]
		fmt.Fprintf(&sb, "| %t | %.0f attempts/s | %s / %s | %d | %d |\n", hold, res.Throughput,
			res.StartToSucceededP50.Round(time.Millisecond), res.StartToSucceededP99.Round(time.Millisecond), a.DeadTuples, o.DeadTuples)
	}
	t.Logf("\n| snapshot held | throughput | start→succeeded p50 / p99 | attempts dead tuples | outbox dead tuples |\n|---|---|---|---|---|\n%s", sb.String())
}
