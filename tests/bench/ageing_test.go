package bench

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/knowledgefs/kfsdb/kfstype"
	"github.com/knowledgefs/kfsdb/migrate"
	"github.com/knowledgefs/kfsdb/migrate/redact"
	"github.com/knowledgefs/kfsdb/pgsource"
	"github.com/knowledgefs/kfsdb/repo"
	"github.com/knowledgefs/kfsdb/tests/pgtest"
	"github.com/knowledgefs/kfsdb/tests/scratch"
	"github.com/knowledgefs/kfsdb/tests/testfactory"
)

// ageingGoal is issue 40's: each operation within 1.1x of its figure on
// empty tables.
const ageingGoal = 1.1

// ageingStartTenant is the tenant of the Start operation's attempts.
const ageingStartTenant = "bench-start"

// TestAgeing measures the hot and the operator statements as terminal
// history grows to 10^7 attempts (issue 40 item 1): at each of
// AGEING_LEVELS (default 0,10000,100000,1000000,10000000) cumulative
// history levels (testfactory.InsertTerminalHistory: 10^4 Zipf-skewed
// tenants, a year of ages, realistic terminal states; then VACUUM ANALYZE
// and CHECKPOINT, as BenchmarkScale does) it times, one client, p50 and
// p99 per call:
//
//   - the console's overview (CountAttempts, OutboxBacklog, Throughput and
//     ListStuck of every tenant, as cmd/kfsdb/console's overview page
//     calls them), each of its four reads, and its attempts page
//     (ListAttempts, the largest history tenant's first page of 50);
//   - `kfsdb stuck` (ListStuck, every tenant, 50) and `kfsdb outbox
//     stats` (CountAttempts and OutboxBacklog, every tenant, cap 10^4);
//   - FetchLeases per lease and CompleteMany per call of 8: 150 fetches
//     of 8 walking the tenants (NextAfterTenant), each batch completed, on
//     a backlog of AGEING_BACKLOG (10^4) due attempts of
//     AGEING_BACKLOG_TENANTS (100) tenants, as FetchBudget does;
//   - drain: a worker (pgsource, 8 slots) draining such a backlog,
//     AGEING_DRAINS (3) times; attempts per second (median, lowest);
//   - Start: AGEING_CALLS attempts, each in a space of its own.
//
// Reads run AGEING_CALLS (200) times after 5 untimed. The bench's own rows
// are deleted at the end of each level, so every level's reads see the
// history alone. At each level every op runs again on a connection with
// auto_explain (ANALYZE, BUFFERS, text), the plans of its sixth run kept
// (the generic plan, when the timed pool's prepared statements use one).
//
// Output: one CSV line per (op, level) "ageing,<op>,<level>,<unit>,<p50>,
// <p99>,<p50 ratio to level 0>,<p99 ratio>" (for drain: rate per second,
// median and lowest, ratios level 0's over this level's, so > 1 is worse
// everywhere), the generation time per 10^6, a summary against the goal
// (each op's p50 at the largest level within 1.1x of level 0's; a miss
// prints its plan). With KFS_AGEING_OUT set, files there: ageing.csv,
// ageing-explain.txt (every plan, every level), ageing-worker.csv and
// ageing-operator.csv (p50 ratio per level, for tests/bench/plot).
//
// The server is KFS_BENCH_DATABASE_URL's, otherwise a pgtest container
// started Durable (fsync on, data on a Docker volume), removed at the end.
// make bench-ageing runs it.
func TestAgeing(t *testing.T) {
	if os.Getenv("KFS_AGEING") != "1" {
		t.Skip("set KFS_AGEING=1 (make bench-ageing)")
	}
	ctx := context.Background()
	a := &ageing{
		levels:  ageingLevels(t),
		calls:   envInt(t, "AGEING_CALLS", 200),
		backlog: envInt(t, "AGEING_BACKLOG", 10_000),
		tenants: envInt(t, "AGEING_BACKLOG_TENANTS", 100),
		drains:  envInt(t, "AGEING_DRAINS", 3),
		outDir:  os.Getenv("KFS_AGEING_OUT"),
		results: map[string]map[int]ageingFigure{},
		plans:   map[string]map[int]string{},
		r:       repo.New(nil),
	}
	var srv *pgtest.Server
	var err error
	if u := os.Getenv(EnvDatabaseURL); u != "" {
		srv, err = pgtest.ConnectServer(ctx, u)
	} else {
		srv, err = pgtest.StartServerWithOptions(ctx, pgtest.Options{Durable: true})
	}
	if err != nil {
		t.Fatal(redact.Text(err.Error()))
	}
	t.Cleanup(func() {
		if err := srv.Close(); err != nil {
			t.Error(err)
		}
	})
	name := scratch.RandomName("kfsageing")
	if a.url, err = srv.CreateDatabase(ctx, name, ""); err != nil {
		t.Fatal(redact.Text(err.Error()))
	}
	t.Cleanup(func() {
		if err := srv.DropDatabase(context.Background(), name); err != nil {
			t.Error(redact.Text(err.Error()))
		}
	})
	if _, err := migrate.Up(ctx, a.url); err != nil {
		t.Fatal(redact.Text(err.Error()))
	}
	cfg, err := pgxpool.ParseConfig(a.url)
	if err != nil {
		t.Fatal(err)
	}
	cfg.MaxConns, cfg.MinConns = clients, 1
	if a.pool, err = pgxpool.NewWithConfig(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(a.pool.Close)
	if a.explain, err = newExplainPool(ctx, a.url, &a.notices); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(a.explain.Close)
	var version, fsync, sharedBuffers string
	if err := a.pool.QueryRow(ctx, `SELECT current_setting('server_version'), current_setting('fsync'),
		current_setting('shared_buffers')`).Scan(&version, &fsync, &sharedBuffers); err != nil {
		t.Fatal(err)
	}
	fmt.Printf("pg-server: %s\npg-version: %s\npg-fsync: %s\npg-shared-buffers: %s\ngomaxprocs: %d\n",
		srv.Description(), version, fsync, sharedBuffers, gomaxprocs())
	fmt.Printf("levels: %v\ncalls: %d\nbacklog: %d due attempts of %d tenants\ndrains: %d\n", a.levels, a.calls, a.backlog, a.tenants, a.drains)

	have := 0
	for _, level := range a.levels {
		if level > have {
			a.load(t, have, level)
			have = level
		}
		// Settled tables, as a slowly grown history leaves them (every
		// level, so each is measured after the same VACUUM).
		execEach(t, a.pool, "VACUUM (ANALYZE)", "CHECKPOINT")
		a.measureLevel(ctx, t, level)
	}
	a.report(t)
}

// ageing is TestAgeing's state.
type ageing struct {
	levels                          []int
	calls, backlog, tenants, drains int
	outDir, url                     string
	pool, explain                   *pgxpool.Pool
	notices                         noticeLog
	r                               *repo.Repo
	order                           []string                        // ops in first-measured order
	results                         map[string]map[int]ageingFigure // op -> level
	plans                           map[string]map[int]string       // op -> level -> auto_explain's plans
	csv                             []string
	loads                           []string // one line per history load
}

// ageingFigure is one op at one level: p50 and p99 in unit.
type ageingFigure struct {
	unit     string // "us" per call, "us/lease", or "per_s" (a rate: higher is better)
	p50, p99 float64
}

// worse is how many times worse f is than base (> 1 is worse, for a rate
// too), on p50 and p99.
func (f ageingFigure) worse(base ageingFigure) (p50, p99 float64) {
	if f.unit == "per_s" {
		return base.p50 / f.p50, base.p99 / f.p99
	}
	return f.p50 / base.p50, f.p99 / base.p99
}

func ageingLevels(t *testing.T) []int {
	v := os.Getenv("AGEING_LEVELS")
	if v == "" {
		return []int{0, 10_000, 100_000, 1_000_000, 10_000_000}
	}
	var levels []int
	for f := range strings.SplitSeq(v, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 0 || (len(levels) > 0 && n < levels[len(levels)-1]) {
			t.Fatalf("AGEING_LEVELS=%q: want ascending integers >= 0", v)
		}
		levels = append(levels, n)
	}
	return levels
}

// load adds level-have terminal attempts and prints the time per 10^6.
func (a *ageing) load(t *testing.T, have, level int) {
	t.Helper()
	start := time.Now()
	last := start
	err := testfactory.InsertTerminalHistory(context.Background(), a.pool, level-have, &testfactory.TerminalHistoryOptions{
		Progress: func(done int) {
			if now := time.Now(); now.Sub(last) > 30*time.Second {
				fmt.Printf("#   %d of %d in %s\n", done, level-have, now.Sub(start).Round(time.Second))
				last = now
			}
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	took := time.Since(start)
	line := fmt.Sprintf("history %d -> %d attempts in %s (%.1f s per 10^6 attempts with their outbox rows)",
		have, level, took.Round(time.Millisecond), took.Seconds()/float64(level-have)*1e6)
	a.loads = append(a.loads, line)
	fmt.Println("# " + line)
}

// measureLevel measures every op at level, then deletes the bench's own
// rows.
func (a *ageing) measureLevel(ctx context.Context, t *testing.T, level int) {
	r := a.r
	overviewReads := []struct {
		name string
		call func(db repo.DBTX) error
	}{
		{"overview.count", func(db repo.DBTX) error {
			_, err := r.CountAttempts(ctx, db, &repo.CountAttemptsParams{AllTenants: true})
			return err
		}},
		{"overview.backlog", func(db repo.DBTX) error {
			_, err := r.OutboxBacklog(ctx, db, &repo.OutboxBacklogParams{})
			return err
		}},
		{"overview.throughput", func(db repo.DBTX) error {
			_, err := r.Throughput(ctx, db, &repo.ThroughputParams{AllTenants: true, Cap: repo.ThroughputCapDefault})
			return err
		}},
		{"overview.stuck", func(db repo.DBTX) error {
			_, err := r.ListStuck(ctx, db, &repo.ListStuckParams{AllTenants: true, Limit: repo.MaxListLimit})
			return err
		}},
	}
	reads := []struct {
		name string
		call func(db repo.DBTX) error
	}{
		{"overview", func(db repo.DBTX) error {
			for _, o := range overviewReads {
				if err := o.call(db); err != nil {
					return err
				}
			}
			return nil
		}},
		{"attempts-page", func(db repo.DBTX) error {
			_, err := r.ListAttempts(ctx, db, &repo.ListAttemptsParams{TenantID: testfactory.TerminalHistoryTenant(0),
				States: ageingRunStates, Limit: 50})
			return err
		}},
		{"kfsdb-stuck", func(db repo.DBTX) error {
			_, err := r.ListStuck(ctx, db, &repo.ListStuckParams{AllTenants: true, Limit: 50, PendingOverdue: repo.PendingOverdueDefault})
			return err
		}},
		{"kfsdb-outbox-stats", func(db repo.DBTX) error {
			if _, err := r.CountAttempts(ctx, db, &repo.CountAttemptsParams{AllTenants: true, Cap: repo.CountCapDefault}); err != nil {
				return err
			}
			_, err := r.OutboxBacklog(ctx, db, &repo.OutboxBacklogParams{Cap: repo.CountCapDefault})
			return err
		}},
	}
	reads = append(reads, overviewReads...)
	for _, op := range reads {
		for range 5 {
			if err := op.call(a.pool); err != nil {
				t.Fatalf("%s: %v", op.name, err)
			}
		}
		lat := make([]time.Duration, 0, a.calls)
		for range a.calls {
			t0 := time.Now()
			if err := op.call(a.pool); err != nil {
				t.Fatalf("%s: %v", op.name, err)
			}
			lat = append(lat, time.Since(t0))
		}
		a.record(op.name, level, latencyFigure("us", lat))
		a.explainOnce(ctx, t, op.name, level, func() error { return op.call(a.explain) })
	}

	a.measureFetch(ctx, t, level)
	a.cleanup(ctx, t)
	a.measureDrain(ctx, t, level)
	a.measureStart(ctx, t, level)
	a.cleanup(ctx, t)
}

// ageingRunStates is every run state, as the attempts page asks by
// default.
var ageingRunStates = kfstype.RunStates()

// measureFetch times FetchLeases (per lease) and CompleteMany (per call)
// on a fresh backlog, as measureFetchCost fetches.
func (a *ageing) measureFetch(ctx context.Context, t *testing.T, level int) {
	cands := a.insertBacklog(ctx, t)
	var fetchLat, completeLat []time.Duration
	after := ""
	fetchComplete := func(db repo.DBTX, timed bool) {
		t0 := time.Now()
		res, err := a.r.FetchLeases(ctx, db, &repo.FetchLeasesParams{WorkerID: benchWorker, BatchSize: fetchBudgetBatch, AfterTenant: after})
		if err != nil {
			t.Fatal(err)
		}
		took := time.Since(t0)
		if len(res.Leased) == 0 {
			t.Fatalf("level %d: a fetch leased nothing with a backlog left", level)
		}
		after = res.NextAfterTenant
		entries := make([]repo.CompleteManyEntry, len(res.Leased))
		for i, la := range res.Leased {
			c := cands[la.Attempt.TenantID]
			entries[i] = repo.CompleteManyEntry{Lease: la.Lease, Through: true, CandidatePublicationID: &c.id, CandidateFingerprint: &c.fingerprint}
		}
		t0 = time.Now()
		done, err := a.r.CompleteMany(ctx, db, &repo.CompleteManyParams{Entries: entries})
		if err != nil {
			t.Fatal(err)
		}
		if timed {
			fetchLat = append(fetchLat, took/time.Duration(len(res.Leased)))
			completeLat = append(completeLat, time.Since(t0))
		}
		for _, d := range done {
			if d.Err != nil {
				t.Fatal(d.Err)
			}
		}
	}
	for range min(fetchBudgetFetches, a.backlog/(2*fetchBudgetBatch)) {
		fetchComplete(a.pool, true)
	}
	a.record("FetchLeases", level, latencyFigure("us/lease", fetchLat))
	a.record("CompleteMany", level, latencyFigure("us", completeLat))
	// Fetches and their completions explained: the last one's plans.
	for range explainRuns {
		a.notices.reset()
		fetchComplete(a.explain, false)
	}
	plans := a.notices.take()
	a.keepPlans("FetchLeases", level, plans)
	a.keepPlans("CompleteMany", level, plans)
}

// measureDrain drains a fresh backlog drains times with kfsdb's worker.
func (a *ageing) measureDrain(ctx context.Context, t *testing.T, level int) {
	var rates []time.Duration // nanoseconds per attempt, sorted: p50, and the slowest
	for range a.drains {
		cands := a.insertBacklog(ctx, t)
		execEach(t, a.pool, "CHECKPOINT")
		took, err := drainKfsdbWith(ctx, a.url, cands, a.backlog, pgsource.Config{})
		if err != nil {
			t.Fatalf("drain at level %d: %v", level, err)
		}
		rates = append(rates, took/time.Duration(a.backlog))
		a.cleanup(ctx, t)
	}
	slices.Sort(rates)
	a.record("drain", level, ageingFigure{unit: "per_s", p50: 1e9 / float64(rates[len(rates)/2]), p99: 1e9 / float64(rates[len(rates)-1])})
}

// measureStart times Start, each attempt in a space of its own of one
// tenant (the space and asset inserted untimed).
func (a *ageing) measureStart(ctx context.Context, t *testing.T, level int) {
	tenant := ageingStartTenant
	scope := func() *testfactory.Scope {
		return testfactory.NewScope(ctx, t, a.pool, &testfactory.ScopeOpts{TenantID: &tenant})
	}
	for range 5 {
		if _, err := a.r.Start(ctx, a.pool, scope().StartParams()); err != nil {
			t.Fatal(err)
		}
	}
	lat := make([]time.Duration, 0, a.calls)
	for range a.calls {
		p := scope().StartParams()
		t0 := time.Now()
		if _, err := a.r.Start(ctx, a.pool, p); err != nil {
			t.Fatal(err)
		}
		lat = append(lat, time.Since(t0))
	}
	a.record("Start", level, latencyFigure("us", lat))
	a.explainOnce(ctx, t, "Start", level, func() error { _, err := a.r.Start(ctx, a.explain, scope().StartParams()); return err })
}

// insertBacklog inserts the backlog (insertBacklog, no history) and
// analyzes the two tables, so that the backlog's rows are in the
// statistics at every level alike.
func (a *ageing) insertBacklog(ctx context.Context, t *testing.T) map[string]candidate {
	cands, err := insertBacklog(ctx, a.pool, a.tenants, a.backlog, 0, false)
	if err != nil {
		t.Fatal(err)
	}
	execEach(t, a.pool, "ANALYZE document_compilation_attempts, document_compilation_outbox")
	return cands
}

// cleanup deletes the bench's own tenants' rows (the backlog's and
// Start's), leaving the history alone.
func (a *ageing) cleanup(ctx context.Context, t *testing.T) {
	tenants := []string{ageingStartTenant}
	for i := range a.tenants {
		tenants = append(tenants, fmt.Sprintf("budget-%05d", i))
	}
	for _, q := range []string{
		`DELETE FROM document_compilation_attempts WHERE tenant_id = ANY($1)`,
		`DELETE FROM projection_set_publications WHERE tenant_id = ANY($1)`,
		`DELETE FROM knowledge_spaces WHERE tenant_id = ANY($1)`,
	} {
		if _, err := a.pool.Exec(ctx, q, tenants); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
}

func latencyFigure(unit string, lat []time.Duration) ageingFigure {
	slices.Sort(lat)
	us := func(d time.Duration) float64 { return float64(d.Nanoseconds()) / 1e3 }
	return ageingFigure{unit: unit, p50: us(lat[len(lat)/2]), p99: us(lat[len(lat)*99/100])}
}

// record keeps f and prints its CSV line.
func (a *ageing) record(op string, level int, f ageingFigure) {
	if a.results[op] == nil {
		a.results[op] = map[int]ageingFigure{}
		a.order = append(a.order, op)
	}
	a.results[op][level] = f
	r50, r99 := f.worse(a.results[op][a.levels[0]])
	line := fmt.Sprintf("ageing,%s,%d,%s,%.1f,%.1f,%.2f,%.2f", op, level, f.unit, f.p50, f.p99, r50, r99)
	a.csv = append(a.csv, line)
	fmt.Println(line)
}

// explainRuns is how many times an op runs on the auto_explain connection,
// its last run's plans kept: past PostgreSQL's five custom plans, so the
// plan shown is the one the timed pool's prepared statements run (the
// cached generic plan, when the planner prefers it).
const explainRuns = 6

// explainOnce runs call explainRuns times on the auto_explain connection
// and keeps the plans of the last run's statements.
func (a *ageing) explainOnce(_ context.Context, t *testing.T, op string, level int, call func() error) {
	for range explainRuns {
		a.notices.reset()
		if err := call(); err != nil {
			t.Fatalf("%s (explained): %v", op, err)
		}
	}
	a.keepPlans(op, level, a.notices.take())
}

func (a *ageing) keepPlans(op string, level int, plans string) {
	if a.plans[op] == nil {
		a.plans[op] = map[int]string{}
	}
	a.plans[op][level] = plans
}

// ageingPlots are the two charts: the worker's path and the operator's
// reads, each op's p50 at a level over its p50 at level 0.
var ageingPlots = []struct {
	file string
	ops  []string
}{
	{"ageing-worker.csv", []string{"Start", "FetchLeases", "CompleteMany", "drain"}},
	{"ageing-operator.csv", []string{"overview", "attempts-page", "kfsdb-stuck", "kfsdb-outbox-stats"}},
}

// report prints the summary against the goal and writes the files.
func (a *ageing) report(t *testing.T) {
	base, top := a.levels[0], a.levels[len(a.levels)-1]
	var smallest int // the smallest level with history, for the tenants' share of a miss
	for _, l := range a.levels {
		if l > 0 {
			smallest = l
			break
		}
	}
	var sum strings.Builder
	fmt.Fprintf(&sum, "== ageing summary: p50 (p99) at %d historical attempts against %d; goal: p50 within %.1fx\n", top, base, ageingGoal)
	for _, l := range a.loads {
		fmt.Fprintf(&sum, "%s\n", l)
	}
	fmt.Fprintf(&sum, "%-20s %-9s %12s %12s %8s %8s %12s  %-6s %s\n", "op", "unit", "p50@"+strconv.Itoa(base), "p50@"+strconv.Itoa(top),
		"p50 x", "p99 x", "p50 x/"+strconv.Itoa(smallest), "goal", "flat from "+strconv.Itoa(smallest))
	var missed []string
	for _, op := range a.order {
		f0, f := a.results[op][base], a.results[op][top]
		r50, r99 := f.worse(f0)
		rs, flat := 0.0, "-"
		if fs, ok := a.results[op][smallest]; ok && smallest > 0 {
			rs, _ = f.worse(fs)
			flat = verdict(rs)
		}
		goal := verdict(r50)
		if goal != "ok" {
			missed = append(missed, op)
		}
		fmt.Fprintf(&sum, "%-20s %-9s %12.1f %12.1f %8.2f %8.2f %12.2f  %-6s %s\n", op, f.unit, f0.p50, f.p50, r50, r99, rs, goal, flat)
	}
	for _, op := range missed {
		if sub, ok := ageingComposite[op]; ok {
			fmt.Fprintf(&sum, "\n-- %s missed the goal; its statements are %s's, whose plans follow when they missed too\n", op, sub)
			continue
		}
		fmt.Fprintf(&sum, "\n-- %s missed the goal; its plans at %d (auto_explain, ANALYZE, BUFFERS):\n%s\n", op, top, a.plans[op][top])
	}
	fmt.Print(sum.String())
	if a.outDir == "" {
		return
	}
	files := map[string]string{
		"ageing.csv":         "# op,level,unit,p50,p99,p50 ratio to level 0,p99 ratio (for drain: level 0's rate over this one's)\n" + strings.Join(a.csv, "\n") + "\n",
		"ageing-summary.txt": sum.String(),
		"ageing-explain.txt": a.explainText(),
	}
	for _, p := range ageingPlots {
		var b strings.Builder
		fmt.Fprintf(&b, "# p50 at each history level over p50 at level %d (drain: level %d's rate over this one's); TestAgeing\nhistory", base, base)
		for _, op := range p.ops {
			b.WriteString("," + op)
		}
		b.WriteString("\n")
		for _, l := range a.levels {
			if l <= 0 {
				continue // the log axis starts at the first history level
			}
			b.WriteString(strconv.Itoa(l))
			for _, op := range p.ops {
				if f, ok := a.results[op][l]; ok {
					r50, _ := f.worse(a.results[op][base])
					fmt.Fprintf(&b, ",%.2f", r50)
				} else {
					b.WriteString(",")
				}
			}
			b.WriteString("\n")
		}
		files[p.file] = b.String()
	}
	for name, text := range files {
		if err := os.WriteFile(filepath.Join(a.outDir, name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// ageingComposite are the ops made of other ops' statements.
var ageingComposite = map[string]string{
	"overview":           "overview.count, overview.backlog, overview.throughput and overview.stuck",
	"kfsdb-outbox-stats": "overview.count and overview.backlog (the same statements and cap)",
}

func verdict(ratio float64) string {
	if ratio > ageingGoal {
		return "MISS"
	}
	return "ok"
}

// explainText is every op's plans at every level.
func (a *ageing) explainText() string {
	var b strings.Builder
	for _, op := range a.order {
		for _, l := range a.levels {
			if p, ok := a.plans[op][l]; ok {
				fmt.Fprintf(&b, "==== %s at %d historical attempts\n%s\n", op, l, p)
			}
		}
	}
	return b.String()
}

// noticeLog keeps auto_explain's text plans, sent as notices.
type noticeLog struct{ b strings.Builder }

func (n *noticeLog) onNotice(_ *pgconn.PgConn, m *pgconn.Notice) {
	n.b.WriteString(m.Message)
	n.b.WriteString("\n")
}

func (n *noticeLog) reset() { n.b.Reset() }

func (n *noticeLog) take() string {
	s := n.b.String()
	n.b.Reset()
	return s
}

// newExplainPool is one connection sending every statement's plan
// (analyzed, with buffers and timing, as text) to log as a notice.
func newExplainPool(ctx context.Context, url string, log *noticeLog) (*pgxpool.Pool, error) {
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, err
	}
	cfg.MaxConns, cfg.MinConns = 1, 1
	cfg.ConnConfig.OnNotice = log.onNotice
	cfg.AfterConnect = func(ctx context.Context, c *pgx.Conn) error {
		for _, s := range append([]string{"LOAD 'auto_explain'"}, testfactory.AutoExplainToNotices...) {
			if _, err := c.Exec(ctx, s); err != nil {
				return fmt.Errorf("auto_explain (needs a superuser): %w", err)
			}
		}
		for _, s := range []string{"SET auto_explain.log_format = text", "SET auto_explain.log_timing = on"} {
			if _, err := c.Exec(ctx, s); err != nil {
				return err
			}
		}
		return nil
	}
	return pgxpool.NewWithConfig(ctx, cfg)
}
