package bench

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io/fs"
	"os"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/knowledgefs/kfsdb/bench/kfsdb-bench/loadgen"
	"github.com/knowledgefs/kfsdb/db/migrations"
	"github.com/knowledgefs/kfsdb/repo"
)

// fleetConfig is TestFleet's environment.
type fleetConfig struct {
	bin                          string
	processes, slots, producers  int
	seconds, idleSeconds, spaces int
	rates                        []float64
	modes, wakeups               []string
	stepDelay, pollInterval      time.Duration
	pollJitter                   float64
	bouncerPollInterval          time.Duration
	bouncerPool, fanoutStarts    int
	fanoutGap                    time.Duration
	fanoutSeconds, maxAttempts   int
	fanoutListeners              []int
	maxConns                     int
}

func fleetConfigFromEnv(t *testing.T) *fleetConfig {
	t.Helper()
	c := &fleetConfig{bin: os.Getenv("KFS_FLEET_BIN"),
		processes: envInt(t, "FLEET_PROCESSES", 50), slots: envInt(t, "FLEET_SLOTS", 8), producers: envInt(t, "FLEET_PRODUCERS", 8),
		seconds: envInt(t, "FLEET_SECONDS", 30), idleSeconds: envInt(t, "FLEET_IDLE_SECONDS", 60), spaces: envInt(t, "FLEET_SPACES", 8),
		bouncerPool: envInt(t, "FLEET_PGBOUNCER_POOL", 20), fanoutStarts: envInt(t, "FLEET_FANOUT_STARTS", 200),
		fanoutSeconds: envInt(t, "FLEET_FANOUT_SECONDS", 5), maxAttempts: envInt(t, "FLEET_MAX_ATTEMPTS", 100_000),
		stepDelay: envDuration(t, "FLEET_STEP_DELAY", 10*time.Millisecond), pollInterval: envDuration(t, "FLEET_POLL_INTERVAL", 0),
		fanoutGap: envDuration(t, "FLEET_FANOUT_GAP", 50*time.Millisecond)}
	if c.bin == "" {
		t.Fatal("KFS_FLEET_BIN must name a kfsdb-bench binary (make bench-fleet builds one)")
	}
	if s := os.Getenv("FLEET_POLL_JITTER"); s != "" {
		j, err := strconv.ParseFloat(s, 64)
		if err != nil || j < 0 || j > 1 {
			t.Fatalf("FLEET_POLL_JITTER=%q: want 0..1", s)
		}
		c.pollJitter = j
	}
	if s := os.Getenv("FLEET_MAX_CONNS"); s != "" {
		c.maxConns = envInt(t, "FLEET_MAX_CONNS", 0)
	}
	for f := range strings.FieldsSeq(envString("FLEET_RATES", "0 150 300")) {
		r, err := strconv.ParseFloat(f, 64)
		if err != nil || r < 0 {
			t.Fatalf("FLEET_RATES=%q: want attempts/s (0: unpaced), space-separated", os.Getenv("FLEET_RATES"))
		}
		c.rates = append(c.rates, r)
	}
	c.modes = strings.Fields(envString("FLEET_MODES", "direct pgbouncer idle fanout"))
	var names []string
	for _, w := range wakeupChecks {
		names = append([]string{w.name}, names...)
	}
	c.wakeups = strings.Fields(envString("FLEET_WAKEUPS", strings.Join(names, " ")))
	for _, w := range c.wakeups {
		if !slices.Contains(names, w) {
			t.Fatalf("FLEET_WAKEUPS: unknown %q (want some of %s)", w, strings.Join(names, ", "))
		}
	}
	c.bouncerPollInterval = envDuration(t, "FLEET_PGBOUNCER_POLL_INTERVAL", 100*time.Millisecond)
	c.fanoutListeners = slices.Compact([]int{0, 1, c.processes})
	if s := os.Getenv("FLEET_FANOUT_LISTENERS"); s != "" {
		c.fanoutListeners = nil
		for f := range strings.FieldsSeq(s) {
			n, err := strconv.Atoi(f)
			if err != nil || n < 0 {
				t.Fatalf("FLEET_FANOUT_LISTENERS=%q: want counts of idle processes, space-separated", s)
			}
			c.fanoutListeners = append(c.fanoutListeners, n)
		}
	}
	return c
}

func envString(name, def string) string {
	if s, ok := os.LookupEnv(name); ok {
		return s
	}
	return def
}

func envDuration(t *testing.T, name string, def time.Duration) time.Duration {
	t.Helper()
	s := os.Getenv(name)
	if s == "" {
		return def
	}
	d, err := time.ParseDuration(s)
	if err != nil || d < 0 {
		t.Fatalf("%s=%q: want a duration", name, s)
	}
	return d
}

// oneProcessShape is the one process with the fleet's total slots:
// the fewest workers (each at most 64 slots) that divide them evenly.
func oneProcessShape(total int) (workers, concurrency int) {
	for w := (total + 63) / 64; w <= total; w++ {
		if total%w == 0 {
			return w, total / w
		}
	}
	return total, 1
}

// TestFleet is make bench-fleet (scripts/bench-fleet.sh): FLEET_PROCESSES
// `kfsdb-bench work` processes of FLEET_SLOTS slots against one process
// with as many slots, under the same producers, with direct delivery
// (LISTEN) and poll-only through PgBouncer; an idle fleet's cost; the
// NOTIFY fan-out's cost per Start. See the script for the knobs. It runs
// only with KFS_FLEET=1.
func TestFleet(t *testing.T) {
	if os.Getenv("KFS_FLEET") != "1" {
		t.Skip("set KFS_FLEET=1 (make bench-fleet)")
	}
	requireEnv(t)
	c := fleetConfigFromEnv(t)
	b := &fleetBench{c: c, url: env.url, db: dbName(t, env.url), wake: migratedWakeups}
	b.open(t)
	defer b.pool.Close()
	total := c.processes * c.slots
	ow, oc := oneProcessShape(total)
	t.Logf("fleet: %d processes x 1 worker x %d slots; one process: %d workers x %d slots; step delay %s; producers %d; %d s per run",
		c.processes, c.slots, ow, oc, c.stepDelay, c.producers, c.seconds)
	var summary []string
	for _, mode := range c.modes {
		switch mode {
		case "direct":
			for _, wake := range c.wakeups {
				b.setWakeups(t, wake)
				summary = append(summary, b.compare(t, mode, wake, total, c.directURL(b.url), false, c.pollInterval)...)
			}
			b.setWakeups(t, migratedWakeups)
		case "pgbouncer":
			burl, stop := startBouncer(t, b.url, c.bouncerPool, total*3+200)
			summary = append(summary, b.compare(t, mode, "none (poll only)", total, burl(b.db), true, c.bouncerPollInterval)...)
			stop()
		case "idle":
			b.idle(t, "direct", c.processes, procSpec{bin: c.bin, url: c.directURL(b.url), workers: 1, concurrency: c.slots,
				stepDelay: c.stepDelay, pollJitter: c.pollJitter, pollInterval: c.pollInterval, idPrefix: "idle"})
			if slices.Contains(c.modes, "pgbouncer") {
				burl, stop := startBouncer(t, b.url, c.bouncerPool, total*3+200)
				b.idle(t, "pgbouncer", c.processes, procSpec{bin: c.bin, url: burl(b.db), workers: 1, concurrency: c.slots,
					stepDelay: c.stepDelay, pollJitter: c.pollJitter, pollInterval: c.bouncerPollInterval, pollOnly: true, idPrefix: "idle"})
				stop()
			}
		case "fanout":
			for _, wake := range c.wakeups {
				b.setWakeups(t, wake)
				for _, n := range c.fanoutListeners {
					b.fanout(t, wake, n, procSpec{bin: c.bin, url: c.directURL(b.url), workers: 1, concurrency: c.slots,
						stepDelay: c.stepDelay, pollJitter: c.pollJitter, pollInterval: c.pollInterval, maxConns: c.maxConns, idPrefix: "fanout"})
				}
			}
			b.setWakeups(t, migratedWakeups)
		default:
			t.Fatalf("FLEET_MODES: unknown mode %q (want direct, pgbouncer, idle, fanout)", mode)
		}
	}
	fmt.Println()
	fmt.Println("== fleet summary (goal: fleet throughput >= 0.9x one process's)")
	fmt.Println("| delivery | wake-ups | load | fleet /s | one process /s | fleet vs one (goal ≥ 0.9×) | fleet p99 ms | one p99 ms | server conns fleet / one (max) | fetches per Start fleet / one |")
	fmt.Println("|---|---|---|---:|---:|---:|---:|---:|---:|---:|")
	for _, s := range summary {
		fmt.Println(s)
	}
	for _, s := range b.lines {
		fmt.Println(s)
	}
}

// compare runs, for each load, the fleet and then one process with as
// many slots, and returns the summary's lines.
func (b *fleetBench) compare(t *testing.T, mode, wake string, total int, url string, pollOnly bool, poll time.Duration) []string {
	t.Helper()
	c := b.c
	ow, oc := oneProcessShape(total)
	var lines []string
	for _, rate := range c.rates {
		fleet := b.lifecycle(t, mode, "fleet", rate, c.processes, procSpec{bin: c.bin, url: url, workers: 1, concurrency: c.slots,
			stepDelay: c.stepDelay, pollJitter: c.pollJitter, pollInterval: poll, pollOnly: pollOnly, maxConns: c.maxConns, idPrefix: "fleet"})
		one := b.lifecycle(t, mode, "one", rate, 1, procSpec{bin: c.bin, url: url, workers: ow, concurrency: oc,
			stepDelay: c.stepDelay, pollJitter: c.pollJitter, pollInterval: poll, pollOnly: pollOnly, idPrefix: "one"})
		ratio := fleet.throughput / one.throughput
		goal := "met"
		if !(ratio >= 0.9) {
			goal = "MISSED"
		}
		lines = append(lines, fmt.Sprintf("| %s | %s | %s | %.0f | %.0f | %.2f× (%s) | %.0f | %.0f | %d / %d | %.2f / %.2f |",
			mode, wake, rateText(rate), fleet.throughput, one.throughput, ratio, goal,
			fleet.p99ms, one.p99ms, fleet.maxConns, one.maxConns, fleet.fetchesPerStart, one.fetchesPerStart))
	}
	return lines
}

// wakeupCheck is a wake-up check: the migration sections that put it in
// place, run in order.
type wakeupCheck struct {
	name     string
	sections []migrationSection
}

// migrationSection is a migration's Up or Down section.
type migrationSection struct {
	file string
	down bool
}

// wakeupChecks are the wake-up checks FLEET_WAKEUPS names, in the order
// they were migrated: the last is the one a migrated database has.
var wakeupChecks = []wakeupCheck{
	// Migration 0007's: every commit that made a row due while anyone was
	// registered idle notified every listener (0010's Down restores it,
	// once 0013's has enabled 0007's triggers again).
	{"broadcast", []migrationSection{{"00013_held_wakeups.sql", true}, {"00010_targeted_wakeups.sql", true}}},
	// Migration 0010's: one registered idle listener per row made due,
	// named in the payload; everyone woken when every registration is
	// held.
	{"targeted", []migrationSection{{"00013_held_wakeups.sql", true}, {"00010_targeted_wakeups.sql", false}}},
	// Migration 0013's: as 0010's, and a commit that finds every
	// registration held names those listeners (up to eight) instead of
	// waking every process.
	{"held", []migrationSection{{"00013_held_wakeups.sql", true}, {"00010_targeted_wakeups.sql", false}, {"00013_held_wakeups.sql", false}}},
}

// migratedWakeups is the wake-up check of a migrated database.
var migratedWakeups = wakeupChecks[len(wakeupChecks)-1].name

// setWakeups puts the wake-up check named wake in place (wakeupChecks).
func (b *fleetBench) setWakeups(t *testing.T, wake string) {
	t.Helper()
	i := slices.IndexFunc(wakeupChecks, func(c wakeupCheck) bool { return c.name == wake })
	if i < 0 {
		t.Fatalf("FLEET_WAKEUPS: unknown %q", wake)
	}
	var ran []string
	for _, s := range wakeupChecks[i].sections {
		text, err := fs.ReadFile(migrations.FS, s.file)
		if err != nil {
			t.Fatal(err)
		}
		up, down, ok := strings.Cut(string(text), "-- +goose Down")
		if !ok {
			t.Fatalf("%s: no Down section", s.file)
		}
		sql, section := up[strings.Index(up, "-- +goose Up"):], "Up"
		if s.down {
			sql, section = down, "Down"
		}
		if _, err := b.pool.Exec(context.Background(), sql); err != nil {
			t.Fatalf("wake-ups %s: %s %s: %v", wake, s.file, section, err)
		}
		ran = append(ran, s.file+" "+section)
	}
	b.wake = wake
	fmt.Printf("wakeups=%s (%s)\n", wake, strings.Join(ran, ", then "))
}

func (c *fleetConfig) directURL(url string) string {
	if strings.Contains(url, "?") {
		return url
	}
	return url + "?sslmode=disable"
}

func rateText(rate float64) string {
	if rate == 0 {
		return "unpaced"
	}
	return fmt.Sprintf("%.0f/s", rate)
}

func dbName(t *testing.T, url string) string {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		t.Fatal(err)
	}
	return cfg.ConnConfig.Database
}

// fleetBench is the producers' side and the measurements, shared by the
// runs.
type fleetBench struct {
	c       *fleetConfig
	url, db string
	pool    *pgxpool.Pool
	repo    *repo.Repo
	lines   []string
	// wake is the wake-up check in place (setWakeups).
	wake string
}

func (b *fleetBench) open(t *testing.T) {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(b.url)
	if err != nil {
		t.Fatal(err)
	}
	cfg.MaxConns = int32(b.c.producers + 4)
	cfg.ConnConfig.RuntimeParams["application_name"] = "kfsdb-fleet-producer"
	b.repo = repo.New(nil)
	cfg.AfterConnect = b.repo.Prepare
	if b.pool, err = pgxpool.NewWithConfig(context.Background(), cfg); err != nil {
		t.Fatal(err)
	}
	if _, err := b.pool.Exec(context.Background(), "CREATE EXTENSION IF NOT EXISTS pg_stat_statements"); err != nil {
		t.Fatalf("pg_stat_statements (the server needs shared_preload_libraries=pg_stat_statements): %v", err)
	}
}

// fleetTenant is one run's tenant: its spaces (each with a candidate the
// stand-in handler binds) and unstarted assets.
type fleetTenant struct {
	id         string
	generation uuid.UUID
	spaces     []uuid.UUID
	assets     []uuid.UUID
	next       atomic.Int64
}

func (b *fleetBench) tenant(t *testing.T, n int) *fleetTenant {
	t.Helper()
	ft := &fleetTenant{id: "fleet-" + uuid.NewString()[:8], generation: uuid.New()}
	var candidates []uuid.UUID
	var fps []string
	for range b.c.spaces {
		sp, cand := uuid.New(), uuid.New()
		sum := sha256.Sum256(cand[:])
		ft.spaces, candidates, fps = append(ft.spaces, sp), append(candidates, cand), append(fps, "projection-set-sha256:"+hex.EncodeToString(sum[:]))
	}
	ft.assets = make([]uuid.UUID, n)
	for i := range ft.assets {
		ft.assets[i] = uuid.New()
	}
	ctx := context.Background()
	for _, q := range []struct {
		sql  string
		args []any
	}{
		{`INSERT INTO knowledge_spaces (id, tenant_id, slug, name) SELECT s, $2, 'fleet-' || n, 'Fleet' FROM unnest($1::uuid[]) WITH ORDINALITY t(s, n)`,
			[]any{ft.spaces, ft.id}},
		{`INSERT INTO projection_set_publications (id, tenant_id, knowledge_space_id, fingerprint, projection_version, status)
			SELECT c, $2, s, f, 1, 'candidate' FROM unnest($1::uuid[], $3::uuid[], $4::text[]) t(c, s, f)`, []any{candidates, ft.id, ft.spaces, fps}},
		{`INSERT INTO document_assets (id, knowledge_space_id, filename, mime_type, object_key, sha256, size_bytes, version)
			SELECT a, ($2::uuid[])[1 + (n - 1) % cardinality($2::uuid[])], 'fleet.pdf', 'application/pdf', 'fleet/' || a, md5(a::text) || md5(a::text), 1, 1
			  FROM unnest($1::uuid[]) WITH ORDINALITY t(a, n)`, []any{ft.assets, ft.spaces}},
		{`ANALYZE document_assets, knowledge_spaces, projection_set_publications`, nil},
	} {
		if _, err := b.pool.Exec(ctx, q.sql, q.args...); err != nil {
			t.Fatalf("fleet setup: %v", err)
		}
	}
	return ft
}

// start starts the tenant's next attempt and returns how long Start took.
func (b *fleetBench) start(ctx context.Context, ft *fleetTenant) (time.Duration, bool, error) {
	i := int(ft.next.Add(1) - 1)
	if i >= len(ft.assets) {
		return 0, false, nil
	}
	t0 := time.Now()
	_, err := b.repo.Start(ctx, b.pool, &repo.StartParams{TenantID: ft.id, KnowledgeSpaceID: ft.spaces[i%len(ft.spaces)],
		DocumentAssetID: ft.assets[i], DocumentVersion: 1, PublicationGenerationID: ft.generation})
	return time.Since(t0), true, err
}

// produce runs the producers for d, paced to rate (0: unpaced), and
// returns every Start's duration.
func (b *fleetBench) produce(t *testing.T, ft *fleetTenant, rate float64, d time.Duration) []time.Duration {
	t.Helper()
	ctx := context.Background()
	begin := time.Now()
	end := begin.Add(d)
	var k atomic.Int64
	var mu sync.Mutex
	var lat []time.Duration
	var wg sync.WaitGroup
	var failed atomic.Pointer[error]
	for range b.c.producers {
		wg.Go(func() {
			for time.Now().Before(end) {
				if rate > 0 {
					i := k.Add(1) - 1
					time.Sleep(time.Until(begin.Add(time.Duration(float64(i) / rate * float64(time.Second)))))
					if !time.Now().Before(end) {
						return
					}
				}
				dt, ok, err := b.start(ctx, ft)
				if err != nil {
					failed.Store(&err)
					return
				}
				if !ok {
					return
				}
				mu.Lock()
				lat = append(lat, dt)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if p := failed.Load(); p != nil {
		t.Fatalf("Start: %v", *p)
	}
	return lat
}

// serverNow is the database's clock.
func (b *fleetBench) serverNow(t *testing.T) time.Time {
	t.Helper()
	var now time.Time
	if err := b.pool.QueryRow(context.Background(), "SELECT clock_timestamp()").Scan(&now); err != nil {
		t.Fatal(err)
	}
	return now
}

func (b *fleetBench) resetStatements(t *testing.T) {
	t.Helper()
	if _, err := b.pool.Exec(context.Background(), "SELECT pg_stat_statements_reset()"); err != nil {
		t.Fatal(err)
	}
}

// statementCalls are pg_stat_statements' calls since the reset: FetchLeases
// and every statement of this database.
func (b *fleetBench) statementCalls(t *testing.T) (fetches, all int64) {
	t.Helper()
	if err := b.pool.QueryRow(context.Background(), `SELECT
		coalesce(sum(calls) FILTER (WHERE query LIKE '-- name: FetchLeases %'), 0)::bigint, coalesce(sum(calls), 0)::bigint
		FROM pg_stat_statements s JOIN pg_database d ON d.oid = s.dbid WHERE d.datname = current_database()`).Scan(&fetches, &all); err != nil {
		t.Fatal(err)
	}
	return fetches, all
}

// connections counts the workers' server connections by state.
func (b *fleetBench) connections(ctx context.Context) (map[string]int, int, error) {
	rows, err := b.pool.Query(ctx, `SELECT coalesce(state, 'none'), count(*)::int FROM pg_stat_activity
		WHERE datname = current_database() AND application_name = $1 GROUP BY 1`, fleetWorkerApp)
	if err != nil {
		return nil, 0, err
	}
	defer rows.Close()
	out, total := map[string]int{}, 0
	for rows.Next() {
		var s string
		var n int
		if err := rows.Scan(&s, &n); err != nil {
			return nil, 0, err
		}
		out[s] = n
		total += n
	}
	return out, total, rows.Err()
}

// sampleConnections samples connections every 250 ms until stop and
// returns the largest total seen.
func (b *fleetBench) sampleConnections() (stop func() int) {
	done := make(chan struct{})
	var peak atomic.Int64
	var wg sync.WaitGroup
	wg.Go(func() {
		tick := time.NewTicker(250 * time.Millisecond)
		defer tick.Stop()
		for {
			ctx, cancel := waitCtx(5 * time.Second)
			if _, n, err := b.connections(ctx); err == nil && int64(n) > peak.Load() {
				peak.Store(int64(n))
			}
			cancel()
			select {
			case <-done:
				return
			case <-tick.C:
			}
		}
	})
	return func() int { close(done); wg.Wait(); return int(peak.Load()) }
}

// drain waits for every started attempt of ft to finish.
func (b *fleetBench) drain(t *testing.T, ft *fleetTenant, timeout time.Duration) bool {
	t.Helper()
	for deadline := time.Now().Add(timeout); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		var open int64
		if err := b.pool.QueryRow(context.Background(), `SELECT count(*) FROM document_compilation_attempts WHERE tenant_id = $1 AND completed_at IS NULL`,
			ft.id).Scan(&open); err != nil {
			t.Fatal(err)
		}
		if open == 0 {
			return true
		}
	}
	return false
}

// runResult is one lifecycle run's figures.
type runResult struct {
	throughput, p50ms, p99ms, fetchesPerStart float64
	maxConns                                  int
}

// lifecycle runs one side (n processes of spec) under the producers for
// FLEET_SECONDS at rate and prints one line.
func (b *fleetBench) lifecycle(t *testing.T, mode, side string, rate float64, n int, spec procSpec) runResult {
	t.Helper()
	c := b.c
	ft := b.tenant(t, c.maxAttempts)
	procs := startFleet(t, n, spec)
	defer stopFleet(procs)
	// Warm-up: every process fetches and every connection prepares.
	b.produce(t, ft, 0, 500*time.Millisecond)
	if !b.drain(t, ft, 2*time.Minute) {
		t.Fatal("warm-up did not drain")
	}
	time.Sleep(time.Second) // the fleet goes idle, as between bursts
	b.resetStatements(t)
	cpu0 := loadgen.ServerCPUTime()
	t0 := b.serverNow(t)
	stopSampling := b.sampleConnections()
	lat := b.produce(t, ft, rate, time.Duration(c.seconds)*time.Second)
	t1 := b.serverNow(t)
	drained := b.drain(t, ft, 2*time.Minute)
	peak := stopSampling()
	cpu1 := loadgen.ServerCPUTime()
	fetches, all := b.statementCalls(t)
	stopFleet(procs)
	var procFetches []int64
	var leases int64
	for _, p := range procs {
		procFetches = append(procFetches, p.counter("source_fetches"))
		leases += p.counter("source_fetched_leases")
	}
	var done int64
	var p50, p99 time.Duration
	if err := b.pool.QueryRow(context.Background(), `SELECT count(*) FILTER (WHERE pg_xact_commit_timestamp(xmin) <= $3),
		coalesce(percentile_disc(0.5) WITHIN GROUP (ORDER BY pg_xact_commit_timestamp(xmin) - created_at), '0'),
		coalesce(percentile_disc(0.99) WITHIN GROUP (ORDER BY pg_xact_commit_timestamp(xmin) - created_at), '0')
		FROM document_compilation_attempts WHERE tenant_id = $1 AND created_at >= $2 AND run_state = 'succeeded'`,
		ft.id, t0, t1).Scan(&done, &p50, &p99); err != nil {
		t.Fatalf("commit times (the server needs track_commit_timestamp = on): %v", err)
	}
	starts := float64(len(lat))
	r := runResult{throughput: float64(done) / t1.Sub(t0).Seconds(), p50ms: ms(p50), p99ms: ms(p99), maxConns: peak,
		fetchesPerStart: float64(fetches) / max(starts, 1)}
	cpu := "-"
	if cpu0 >= 0 && cpu1 >= cpu0 && starts > 0 {
		cpu = fmt.Sprintf("%.0f", float64((cpu1-cpu0).Microseconds())/starts)
	}
	sort.Slice(procFetches, func(i, j int) bool { return procFetches[i] < procFetches[j] })
	fmt.Printf("lifecycle mode=%s wakeups=%s side=%s processes=%d rate=%.0f started=%d throughput=%.1f p50_ms=%.1f p99_ms=%.1f start_p99_ms=%.1f drained=%v "+
		"server_conns_max=%d fetches=%d fetches_per_start=%.2f leases_per_fetch=%.2f proc_fetches_min=%d proc_fetches_median=%d proc_fetches_max=%d statements_per_start=%.1f cpu_us_per_start=%s\n",
		mode, b.wake, side, n, rate, len(lat), r.throughput, r.p50ms, r.p99ms, ms(pct(lat, 0.99)), drained, peak, fetches, r.fetchesPerStart,
		float64(leases)/float64(max(sum(procFetches), 1)), procFetches[0], procFetches[len(procFetches)/2], procFetches[len(procFetches)-1],
		float64(all)/max(starts, 1), cpu)
	if !drained {
		t.Errorf("%s %s rate %.0f: attempts left unfinished after 2 min", mode, side, rate)
	}
	return r
}

// idle measures n idle processes (nothing due) for FLEET_IDLE_SECONDS.
func (b *fleetBench) idle(t *testing.T, mode string, n int, spec procSpec) {
	t.Helper()
	procs := startFleet(t, n, spec)
	defer stopFleet(procs)
	time.Sleep(5 * time.Second) // registered idle, asleep
	b.resetStatements(t)
	cpu0 := loadgen.ServerCPUTime()
	t0 := b.serverNow(t)
	time.Sleep(time.Duration(b.c.idleSeconds) * time.Second)
	t1 := b.serverNow(t)
	cpu1 := loadgen.ServerCPUTime()
	fetches, all := b.statementCalls(t)
	ctx, cancel := waitCtx(10 * time.Second)
	byState, conns, err := b.connections(ctx)
	cancel()
	if err != nil {
		t.Fatal(err)
	}
	secs := t1.Sub(t0).Seconds()
	cpu := "-"
	if cpu0 >= 0 && cpu1 >= cpu0 {
		// Server CPU time per second of the window, in % of one core.
		cpu = fmt.Sprintf("%.2f", 100*(cpu1-cpu0).Seconds()/secs)
	}
	states := make([]string, 0, len(byState))
	for s, k := range byState {
		states = append(states, fmt.Sprintf("%s:%d", strings.ReplaceAll(s, " ", "_"), k))
	}
	sort.Strings(states)
	line := fmt.Sprintf("idle mode=%s processes=%d seconds=%.0f server_cpu_pct_of_core=%s statements_per_s=%.1f statements_per_s_per_process=%.2f "+
		"fetches_per_s=%.1f server_conns=%d conns_per_process=%.1f states=%s",
		mode, n, secs, cpu, float64(all)/secs, float64(all)/secs/float64(n), float64(fetches)/secs, conns, float64(conns)/float64(n), strings.Join(states, ","))
	fmt.Println(line)
	b.lines = append(b.lines, line)
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

func pct(d []time.Duration, p float64) time.Duration {
	if len(d) == 0 {
		return 0
	}
	s := slices.Clone(d)
	slices.Sort(s)
	return s[min(len(s)-1, int(p*float64(len(s))))]
}

func sum(v []int64) int64 {
	var s int64
	for _, x := range v {
		s += x
	}
	return s
}
