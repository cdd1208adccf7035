package bench

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/knowledgefs/kfsdb/bench/kfsdb-bench/loadgen"
	"github.com/knowledgefs/kfsdb/tests/testfactory"
)

// TestPurgeWhileServing measures retention beside live traffic, when
// KFS_PURGE=1 (and KFS_LOADGEN=1, for TestMain's database): the database
// holds PURGE_HISTORY [10^6] terminal attempts completed 29 days ago
// (testfactory.InsertHistory, 50 tenants), and a paced lifecycle run
// (loadgen: direct delivery, 8 producers, 8 slots, PURGE_RATE [150]
// attempts/s for PURGE_SECONDS [120]) runs PURGE_ROUNDS [2] times each way,
// interleaved (the order alternates by round): alone, and beside the
// deploy binary's `kfsdb purge --all-tenants --older-than PURGE_OLDER_THAN
// [24h] --batch PURGE_BATCH [1000] --pause PURGE_PAUSE [100ms]`, the
// binary at KFS_PURGE_KFSDB (make bench-purge builds it), started with the
// run and interrupted (SIGINT) when the run has drained if it has not
// finished. Before each run the history is topped up to PURGE_HISTORY,
// both tables are vacuumed and analyzed, and a CHECKPOINT is taken, so
// both sides start alike.
//
// One line per run: the side, the paced p50/p99 start → the completion's
// commit (pg_xact_commit_timestamp), throughput, the attempts the purge
// deleted, for how long (database clock) and at what rate, and per table
// the live and dead tuples and the autovacuum and autoanalyze runs during
// the run (pg_stat_user_tables). Then medians per side and the ratio of
// p99 with purge to without. A measurement: it asserts nothing about
// figures.
func TestPurgeWhileServing(t *testing.T) {
	if os.Getenv("KFS_PURGE") != "1" {
		t.Skip("set KFS_PURGE=1 and KFS_LOADGEN=1 (make bench-purge)")
	}
	requireEnv(t)
	cfg := purgeBenchConfig(t)
	ctx := context.Background()
	fmt.Printf("purge-config: history=%d rate=%.0f seconds=%d rounds=%d batch=%d pause=%s older_than=%s\n",
		cfg.history, cfg.rate, int(cfg.window.Seconds()), cfg.rounds, cfg.batch, cfg.pause, cfg.olderThan)
	var runs []purgeRun
	for round := 1; round <= cfg.rounds; round++ {
		order := []bool{false, true}
		if round%2 == 0 {
			order = []bool{true, false}
		}
		for _, withPurge := range order {
			run, err := cfg.run(ctx, round, withPurge)
			if err != nil {
				t.Fatal(err)
			}
			fmt.Println(run.line())
			runs = append(runs, run)
		}
	}
	fmt.Print(purgeSummary(runs, cfg.window))
}

// purgeBench is TestPurgeWhileServing's settings.
type purgeBench struct {
	kfsdb             string
	history, rounds   int
	batch             int
	rate              float64
	window, pause     time.Duration
	olderThan         time.Duration
	purgeCountPattern *regexp.Regexp
}

func purgeBenchConfig(t *testing.T) *purgeBench {
	t.Helper()
	c := &purgeBench{
		kfsdb:   os.Getenv("KFS_PURGE_KFSDB"),
		history: envInt(t, "PURGE_HISTORY", 1_000_000),
		rounds:  envInt(t, "PURGE_ROUNDS", 2),
		batch:   envInt(t, "PURGE_BATCH", 1000),
		rate:    float64(envInt(t, "PURGE_RATE", 150)),
		window:  time.Duration(envInt(t, "PURGE_SECONDS", 120)) * time.Second,
		// "purged N terminal attempts ..." or "purged N attempts before the error".
		purgeCountPattern: regexp.MustCompile(`(?m)^purged (\d+) `),
	}
	if c.kfsdb == "" {
		t.Fatal("KFS_PURGE_KFSDB must name the kfsdb binary (make bench-purge builds it)")
	}
	if c.history%100 != 0 {
		t.Fatalf("PURGE_HISTORY=%d: want a multiple of 100", c.history)
	}
	c.pause = envDuration(t, "PURGE_PAUSE", 100*time.Millisecond)
	c.olderThan = envDuration(t, "PURGE_OLDER_THAN", 24*time.Hour)
	return c
}

// purgeRun is one run's figures.
type purgeRun struct {
	round                      int
	withPurge                  bool
	p50, p99                   time.Duration
	throughput                 float64
	completed                  int64
	purged                     int
	purgeSpan                  time.Duration
	purgeFinished              bool
	tables                     map[string]purgeTableStats
	historyBefore, historyLeft int64
}

// purgeTableStats is one table's pg_stat_user_tables after a run, the
// vacuum counts as deltas over the run.
type purgeTableStats struct {
	live, dead, autovacuums, autoanalyzes int64
}

// purgeTables are the two tables whose statistics each run reports.
var purgeTables = []string{"document_compilation_attempts", "document_compilation_outbox"}

func (c *purgeBench) run(ctx context.Context, round int, withPurge bool) (purgeRun, error) {
	run := purgeRun{round: round, withPurge: withPurge}
	var err error
	if run.historyBefore, err = c.topUpHistory(ctx); err != nil {
		return run, err
	}
	before, err := purgeTableSnapshot(ctx)
	if err != nil {
		return run, err
	}
	var purge *purgeProcess
	if withPurge {
		if purge, err = c.startPurge(ctx); err != nil {
			return run, err
		}
	}
	res, runErr := loadgen.Run(ctx, &loadgen.Config{DatabaseURL: env.url, Duration: c.window, Rate: c.rate, Producers: 8, Workers: 8})
	if purge != nil {
		if run.purged, run.purgeSpan, run.purgeFinished, err = purge.stop(c.purgeCountPattern); err != nil {
			return run, err
		}
	}
	if runErr != nil {
		return run, fmt.Errorf("round %d purge=%t: %w", round, withPurge, runErr)
	}
	run.p50, run.p99 = res.StartToCommittedP50, res.StartToCommittedP99
	run.throughput, run.completed = res.Throughput, res.Completed
	// Statistics reach the shared counters within a second of a backend's
	// last transaction.
	time.Sleep(1500 * time.Millisecond)
	after, err := purgeTableSnapshot(ctx)
	if err != nil {
		return run, err
	}
	run.tables = map[string]purgeTableStats{}
	for _, name := range purgeTables {
		a, b := after[name], before[name]
		run.tables[name] = purgeTableStats{live: a.live, dead: a.dead, autovacuums: a.autovacuums - b.autovacuums, autoanalyzes: a.autoanalyzes - b.autoanalyzes}
	}
	run.historyLeft, err = purgeHistoryCount(ctx)
	return run, err
}

// topUpHistory brings the history back to c.history attempts (a purge run
// deleted some), then vacuums and analyzes both tables and checkpoints,
// and returns the history's size.
func (c *purgeBench) topUpHistory(ctx context.Context) (int64, error) {
	n, err := purgeHistoryCount(ctx)
	if err != nil {
		return 0, err
	}
	if missing := (int64(c.history) - n) / 100 * 100; missing > 0 {
		start := time.Now()
		if err := testfactory.InsertHistory(ctx, env.pool, int(missing)); err != nil {
			return 0, err
		}
		fmt.Printf("purge-history: inserted %d terminal attempts in %s\n", missing, time.Since(start).Round(time.Second))
		n += missing
	}
	for _, q := range []string{"VACUUM (ANALYZE) document_compilation_attempts", "VACUUM (ANALYZE) document_compilation_outbox", "CHECKPOINT"} {
		if _, err := env.pool.Exec(ctx, q); err != nil {
			return 0, fmt.Errorf("%s: %w", q, err)
		}
	}
	return n, nil
}

// purgeHistoryCount counts the history's attempts (InsertHistory's tenants).
func purgeHistoryCount(ctx context.Context) (n int64, err error) {
	err = env.pool.QueryRow(ctx, `SELECT count(*) FROM document_compilation_attempts WHERE tenant_id LIKE 'history-%'`).Scan(&n)
	return n, err
}

// purgeTableSnapshot reads both tables' pg_stat_user_tables counters.
func purgeTableSnapshot(ctx context.Context) (map[string]purgeTableStats, error) {
	rows, err := env.pool.Query(ctx, `SELECT relname, n_live_tup, n_dead_tup, autovacuum_count, autoanalyze_count
		FROM pg_stat_user_tables WHERE relname = ANY ($1)`, purgeTables)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := map[string]purgeTableStats{}
	for rows.Next() {
		var name string
		var s purgeTableStats
		if err := rows.Scan(&name, &s.live, &s.dead, &s.autovacuums, &s.autoanalyzes); err != nil {
			return nil, err
		}
		out[name] = s
	}
	return out, rows.Err()
}

// purgeProcess is a running `kfsdb purge` and the database time it
// started at.
type purgeProcess struct {
	cmd            *exec.Cmd
	stdout, stderr bytes.Buffer
	started, ended time.Time
	done           chan error
}

func (c *purgeBench) startPurge(ctx context.Context) (*purgeProcess, error) {
	p := &purgeProcess{done: make(chan error, 1)}
	if err := env.pool.QueryRow(ctx, "SELECT clock_timestamp()").Scan(&p.started); err != nil {
		return nil, err
	}
	p.cmd = exec.Command(c.kfsdb, "purge", "--all-tenants", "--older-than", c.olderThan.String(),
		"--batch", strconv.Itoa(c.batch), "--pause", c.pause.String(), "--reason", "make bench-purge")
	p.cmd.Env = append(os.Environ(), "DATABASE_URL="+env.url)
	p.cmd.Stdout, p.cmd.Stderr = &p.stdout, &p.stderr
	if err := p.cmd.Start(); err != nil {
		return nil, fmt.Errorf("kfsdb purge: %w", err)
	}
	go func() {
		err := p.cmd.Wait()
		// The database clock at the exit ends the purge's span.
		if e := env.pool.QueryRow(ctx, "SELECT clock_timestamp()").Scan(&p.ended); e != nil && err == nil {
			err = e
		}
		p.done <- err
	}()
	return p, nil
}

// stop returns what the purge deleted and for how long (database clock,
// from its start to its exit): it waits for a purge that has finished, and
// interrupts (SIGINT) one still deleting, which then says how many went
// before it stopped.
func (p *purgeProcess) stop(count *regexp.Regexp) (purged int, span time.Duration, finished bool, err error) {
	select {
	case err = <-p.done:
		finished = true
		if err != nil {
			return 0, 0, true, fmt.Errorf("kfsdb purge: %w\n%s%s", err, p.stdout.String(), p.stderr.String())
		}
	default:
		if err := p.cmd.Process.Signal(syscall.SIGINT); err != nil {
			return 0, 0, false, fmt.Errorf("interrupt kfsdb purge: %w", err)
		}
		<-p.done // non-zero: "purged N attempts before the error"
	}
	m := count.FindStringSubmatch(p.stdout.String())
	if m == nil {
		return 0, 0, finished, fmt.Errorf("kfsdb purge printed no count:\n%s%s", p.stdout.String(), p.stderr.String())
	}
	purged, _ = strconv.Atoi(m[1])
	return purged, p.ended.Sub(p.started), finished, nil
}

func (r *purgeRun) line() string {
	side := "alone"
	if r.withPurge {
		side = "purge"
	}
	var b strings.Builder
	fmt.Fprintf(&b, "purge-run round=%d side=%s p50_ms=%.1f p99_ms=%.1f throughput=%.1f completed=%d purged=%d purge_s=%.1f purge_finished=%t deleted_per_s=%.0f history_before=%d history_after=%d",
		r.round, side, purgeMs(r.p50), purgeMs(r.p99), r.throughput, r.completed, r.purged, r.purgeSpan.Seconds(), r.purgeFinished, r.deletionRate(), r.historyBefore, r.historyLeft)
	for _, name := range purgeTables {
		s := r.tables[name]
		short := strings.TrimPrefix(name, "document_compilation_")
		fmt.Fprintf(&b, " %s_live=%d %s_dead=%d %s_autovacuums=%d %s_autoanalyzes=%d", short, s.live, short, s.dead, short, s.autovacuums, short, s.autoanalyzes)
	}
	return b.String()
}

func (r *purgeRun) deletionRate() float64 {
	if r.purgeSpan <= 0 {
		return 0
	}
	return float64(r.purged) / r.purgeSpan.Seconds()
}

func purgeMs(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// purgeSummary is the medians per side and the ratio of the p99s.
func purgeSummary(runs []purgeRun, window time.Duration) string {
	med := func(withPurge bool, f func(r purgeRun) float64) float64 {
		var v []float64
		for _, r := range runs {
			if r.withPurge == withPurge {
				v = append(v, f(r))
			}
		}
		return median(v)
	}
	p50 := func(r purgeRun) float64 { return purgeMs(r.p50) }
	p99 := func(r purgeRun) float64 { return purgeMs(r.p99) }
	tput := func(r purgeRun) float64 { return r.throughput }
	rate := func(r purgeRun) float64 { return r.deletionRate() }
	span := func(r purgeRun) float64 { return r.purgeSpan.Seconds() }
	dead := func(table string) func(r purgeRun) float64 {
		return func(r purgeRun) float64 { return float64(r.tables[table].dead) }
	}
	var b strings.Builder
	fmt.Fprintf(&b, "\n| side | p50 ms committed | p99 ms committed | throughput /s | deleted /s | purge s (window %.0f s) | attempts dead tuples | outbox dead tuples |\n|---|---:|---:|---:|---:|---:|---:|---:|\n", window.Seconds())
	for _, withPurge := range []bool{false, true} {
		side := "alone"
		if withPurge {
			side = "with kfsdb purge"
		}
		fmt.Fprintf(&b, "| %s | %.1f | %.1f | %.1f | %.0f | %.0f | %.0f | %.0f |\n", side, med(withPurge, p50), med(withPurge, p99), med(withPurge, tput),
			med(withPurge, rate), med(withPurge, span), med(withPurge, dead(purgeTables[0])), med(withPurge, dead(purgeTables[1])))
	}
	alone, with := med(false, p99), med(true, p99)
	ratio := 0.0
	if alone > 0 {
		ratio = with / alone
	}
	fmt.Fprintf(&b, "purge-summary: p99 with purge / without = %.2f× (medians %.1f / %.1f ms); p50 %.2f×; throughput %.2f×; deleted %.0f attempts/s\n",
		ratio, with, alone, purgeRatio(med(true, p50), med(false, p50)), purgeRatio(med(true, tput), med(false, tput)), med(true, rate))
	for _, r := range runs {
		if r.withPurge && r.purgeFinished && r.purgeSpan < window {
			fmt.Fprintf(&b, "purge-summary: round %d: the purge finished after %.0f s of the %.0f s window (raise PURGE_HISTORY or PURGE_PAUSE to cover it)\n",
				r.round, r.purgeSpan.Seconds(), window.Seconds())
		}
	}
	return b.String()
}

// purgeRatio is a/b, or 0 when b is 0 (a side measured nothing).
func purgeRatio(a, b float64) float64 {
	if b == 0 {
		return 0
	}
	return a / b
}
