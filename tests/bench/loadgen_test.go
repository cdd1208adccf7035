package bench

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/knowledgefs/kfsdb/bench/kfsdb-bench/delivery"
	"github.com/knowledgefs/kfsdb/bench/kfsdb-bench/loadgen"
)

// TestLoadgen runs the lifecycle load driver when KFS_LOADGEN=1 and logs
// its tables. Environment (defaults in brackets):
//   - LOADGEN_SECONDS [10], LOADGEN_PRODUCERS [8];
//   - LOADGEN_WORKERS [8], comma-separated for several runs;
//   - LOADGEN_SPACES [1]: the knowledge spaces the attempts are spread over;
//   - LOADGEN_RATE [unset: unpaced]: attempts started per second by all
//     producers together;
//   - LOADGEN_STEPS=1: the handler writes every checkpoint [it completes
//     through them in one write];
//   - LOADGEN_ASYNC=1: repo.Config.AsyncProgressCommits for the relay and
//     worker;
//   - LOADGEN_SINGLE_COMPLETIONS=1: each slot completes its own attempt;
//   - LOADGEN_PENDING_WAIT: worker.Config.PendingDeliveryWait, e.g. 20ms
//     (-1ms hands deliveries that beat their mark back at once);
//   - LOADGEN_INDEXES: an index what-if (indexVariants).
func TestLoadgen(t *testing.T) {
	if os.Getenv("KFS_LOADGEN") != "1" {
		t.Skip("set KFS_LOADGEN=1 (make loadgen)")
	}
	requireEnv(t)
	secs := envInt(t, "LOADGEN_SECONDS", 10)
	producers := envInt(t, "LOADGEN_PRODUCERS", 8)
	spaces := envInt(t, "LOADGEN_SPACES", 1)
	var rate float64
	if os.Getenv("LOADGEN_RATE") != "" {
		rate = float64(envInt(t, "LOADGEN_RATE", 0))
	}
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
	var pendingWait time.Duration
	if s := os.Getenv("LOADGEN_PENDING_WAIT"); s != "" {
		d, err := time.ParseDuration(s)
		if err != nil {
			t.Fatalf("LOADGEN_PENDING_WAIT=%q: want a duration (negative: hand back at once)", s)
		}
		pendingWait = d
	}
	variant := os.Getenv("LOADGEN_INDEXES")
	if variant != "" {
		ddl, ok := indexVariants[variant]
		if !ok {
			t.Fatalf("LOADGEN_INDEXES=%q: want one of partial, lifecycle-only", variant)
		}
		// The bench database is this run's own (TestMain creates it).
		if _, err := env.pool.Exec(context.Background(), ddl); err != nil {
			t.Fatalf("LOADGEN_INDEXES=%s: %v", variant, err)
		}
		t.Logf("indexes: %s (a what-if, not the seed's)", variant)
	}
	for _, w := range workers {
		res, err := loadgen.Run(context.Background(), &loadgen.Config{
			DatabaseURL: env.url, Duration: time.Duration(secs) * time.Second, Producers: producers, Workers: w, Spaces: spaces, Rate: rate,
			StepCheckpoints: steps, AsyncProgressCommits: async, SingleCompletions: single, PendingDeliveryWait: pendingWait,
		})
		if err != nil {
			t.Fatal(err)
		}
		var sb strings.Builder
		res.WriteTable(&sb)
		t.Logf("loadgen producers=%d workers=%d spaces=%d rate=%.0f steps=%v async=%v single-completions=%v pending-wait=%s:\n%s", producers, w, spaces, rate, steps, async, single, pendingWait, sb.String())
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
// one run for each delivery of LOADGEN_DELIVERIES [relay postgres]: alone,
// and while another session holds a REPEATABLE READ snapshot open for the
// whole run. It reports throughput, start → succeeded at the worker and at
// the commit (zero unless the server runs with track_commit_timestamp =
// on) and dead tuples side by side; it asserts nothing about them (a
// measurement, not a timing test). The hour-long form, beside the floor
// and River, is make bench-churn (TestChurn).
func TestLongTransaction(t *testing.T) {
	if os.Getenv("KFS_LOADGEN") != "1" {
		t.Skip("set KFS_LOADGEN=1 (make loadgen-longtx)")
	}
	requireEnv(t)
	secs := envInt(t, "LOADGEN_SECONDS", 10)
	deliveries := strings.Fields(os.Getenv("LOADGEN_DELIVERIES"))
	if len(deliveries) == 0 {
		deliveries = []string{string(delivery.Relay), string(delivery.Postgres)}
	}
	var sb strings.Builder
	for _, d := range deliveries {
		mode, err := delivery.Parse(d)
		if err != nil || mode == delivery.NATS {
			t.Fatalf("LOADGEN_DELIVERIES=%q: want relay and/or postgres", d)
		}
		for _, hold := range []bool{false, true} {
			res, err := loadgen.Run(context.Background(), &loadgen.Config{
				DatabaseURL: env.url, Delivery: mode, Duration: time.Duration(secs) * time.Second, HoldSnapshot: hold,
			})
			if err != nil {
				t.Fatal(err)
			}
			a, o := res.Tables["document_compilation_attempts"], res.Tables["document_compilation_outbox"]
			fmt.Fprintf(&sb, "| %s | %t | %.0f attempts/s | %s / %s | %s / %s | %d | %d |\n", mode, hold, res.Throughput,
				res.StartToSucceededP50.Round(time.Millisecond), res.StartToSucceededP99.Round(time.Millisecond),
				res.StartToCommittedP50.Round(time.Millisecond), res.StartToCommittedP99.Round(time.Millisecond), a.DeadTuples, o.DeadTuples)
		}
	}
	t.Logf("\n| delivery | snapshot held | throughput | start→succeeded p50 / p99 | at the commit p50 / p99 | attempts dead tuples | outbox dead tuples |\n|---|---|---|---|---|---|---|\n%s", sb.String())
}

// indexVariants are what-ifs for LOADGEN_INDEXES, measuring what the
// seed's indexes cost the lifecycle: every transition changes an indexed
// state column, so no update is HOT and each row version gets an entry in
// every index. They are applied to the run's own bench database only;
// kfsdb's migrations keep the seed's indexes verbatim.
var indexVariants = map[string]string{
	// partial: the same indexes, each state-keyed one limited to the
	// states its queries look for, so a row version outside them gets no
	// entry there. (Not checked against every query's plan.)
	"partial": `
DROP INDEX document_compilation_attempts_run_schedule_idx;
CREATE INDEX document_compilation_attempts_run_schedule_idx ON document_compilation_attempts
  (run_state, retry_at, created_at, id) WHERE run_state IN ('dispatch_pending', 'queued', 'retry_wait');
DROP INDEX document_compilation_attempts_lease_recovery_idx;
CREATE INDEX document_compilation_attempts_lease_recovery_idx ON document_compilation_attempts
  (run_state, lease_expires_at, heartbeat_at, id) WHERE run_state = 'running';
DROP INDEX document_compilation_attempts_candidate_idx;
CREATE INDEX document_compilation_attempts_candidate_idx ON document_compilation_attempts
  (tenant_id, knowledge_space_id, candidate_publication_id, candidate_fingerprint, id)
  WHERE candidate_publication_id IS NOT NULL;
DROP INDEX document_compilation_attempts_tenant_completed_idx;
CREATE INDEX document_compilation_attempts_tenant_completed_idx ON document_compilation_attempts
  (tenant_id, completed_at, id) WHERE completed_at IS NOT NULL;
DROP INDEX document_compilation_outbox_delivery_due_idx;
CREATE INDEX document_compilation_outbox_delivery_due_idx ON document_compilation_outbox
  (status, available_at, created_at, id) WHERE status IN ('pending', 'dispatched', 'leased');
DROP INDEX document_compilation_outbox_lock_recovery_idx;
CREATE INDEX document_compilation_outbox_lock_recovery_idx ON document_compilation_outbox
  (status, locked_until, created_at, id) WHERE status = 'dispatching';`,
	// lifecycle-only: an upper bound, not a schema anyone should run: only
	// the indexes the minimal lifecycle's statements read (primary keys,
	// the live-attempt and outbox-per-attempt unique keys, delivery due).
	"lifecycle-only": `
DROP INDEX document_compilation_attempts_run_schedule_idx;
DROP INDEX document_compilation_attempts_lease_recovery_idx;
DROP INDEX document_compilation_attempts_document_version_idx;
DROP INDEX document_compilation_attempts_candidate_idx;
DROP INDEX document_compilation_attempts_tenant_completed_idx;
DROP INDEX document_compilation_outbox_idempotency_uq;
DROP INDEX document_compilation_outbox_lock_recovery_idx;`,
}
