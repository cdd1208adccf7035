package bench

import (
	"context"
	"crypto/md5"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/knowledgefs/kfsdb/migrate"
	"github.com/knowledgefs/kfsdb/migrate/redact"
	"github.com/knowledgefs/kfsdb/repo"
	"github.com/knowledgefs/kfsdb/tests/pgtest"
	"github.com/knowledgefs/kfsdb/tests/scratch"
)

// The knowledge space and tenant of the floor scripts (testdata/start-floor).
const (
	floorTenant = "floor"
	floorSpace  = "00000000-0000-0000-0000-0000000000aa"
)

// TestStartFloor compares repo.Start with its floor in one run on one
// server (issue 15), when KFS_START_FLOOR=1 (`make bench-start`). The
// floor is the least a Start can write on the seed schema: the attempt row
// and its outbox row as plain inserts, one data-modifying CTE
// (testdata/start-floor/start_floor.sql, verbatim from the measurement that
// set the target; start_floor_2stmt.sql is the same as two statements),
// run by pgbench with the wake-up trigger disabled, as on the seed schema.
// "floor-autocommit" is the floor's statement alone, one round trip like
// Start on a pool (the floor script sends BEGIN and COMMIT too). Against
// them, with the trigger in place:
//
//   - "floor+trigger": the floor script with migration 0007's trigger;
//   - "start-0007 (pgbench)": the statement Start sent before issue 15
//     (testdata/start-floor/start_0007.sql, generated as below);
//   - "start (pgbench)": the statement repo.Start sends now, captured from
//     a call (pgx tracer, rolled back) and turned into a pgbench script:
//     the ids it generated become gen_random_uuid() (as in the floor), the
//     asset becomes the run's next one, every other argument a typed
//     literal;
//   - "repo.Start (Go)": repo.Start itself, 8 goroutines on an 8-connection
//     pgx pool (pgx's statement cache, as pgbench -M prepared).
//
// Every pgbench run is -c 8 -j 2 -M prepared -T START_FLOOR_SECONDS [10];
// each transaction starts a fresh asset of one space holding
// START_FLOOR_ASSETS [600,000] version-1 assets. One warm-up of every
// variant (then ANALYZE), then START_FLOOR_ROUNDS [3] rounds, the order
// rotated each round, a CHECKPOINT before every run. It prints each run,
// then per variant the median tx/s and its ratio to the floor's median.
//
// The server is KFS_BENCH_DATABASE_URL's (a kfsbench_* database is created
// and dropped there), otherwise a pgtest container started Durable (fsync
// on, data on a Docker volume), removed at the end.
func TestStartFloor(t *testing.T) {
	if os.Getenv("KFS_START_FLOOR") != "1" {
		t.Skip("set KFS_START_FLOOR=1 (make bench-start)")
	}
	bin, err := exec.LookPath("pgbench")
	if err != nil {
		t.Fatal("pgbench is not on PATH")
	}
	fl := &floorRun{
		bin:    bin,
		secs:   envInt(t, "START_FLOOR_SECONDS", 10),
		assets: envInt(t, "START_FLOOR_ASSETS", 600_000),
		dir:    t.TempDir(),
	}
	rounds := envInt(t, "START_FLOOR_ROUNDS", 3)
	ctx := context.Background()

	var srv *pgtest.Server
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
	name := scratch.RandomName("kfsbench")
	if fl.url, err = srv.CreateDatabase(ctx, name, ""); err != nil {
		t.Fatal(redact.Text(err.Error()))
	}
	t.Cleanup(func() {
		if err := srv.DropDatabase(context.Background(), name); err != nil {
			t.Error(redact.Text(err.Error()))
		}
	})
	if _, err := migrate.Up(ctx, fl.url); err != nil {
		t.Fatal(redact.Text(err.Error()))
	}
	cfg, err := pgxpool.ParseConfig(fl.url)
	if err != nil {
		t.Fatal(err)
	}
	cfg.MaxConns, cfg.MinConns = clients, clients
	if fl.pool, err = pgxpool.NewWithConfig(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(fl.pool.Close)

	var version, fsync, syncCommit, sharedBuffers string
	if err := fl.pool.QueryRow(ctx, `SELECT current_setting('server_version'), current_setting('fsync'),
		current_setting('synchronous_commit'), current_setting('shared_buffers')`).Scan(&version, &fsync, &syncCommit, &sharedBuffers); err != nil {
		t.Fatal(err)
	}
	fmt.Printf("pg-server: %s\npg-version: %s\npg-fsync: %s\npg-synchronous-commit: %s\npg-shared-buffers: %s\n",
		srv.Description(), version, fsync, syncCommit, sharedBuffers)
	fmt.Printf("clients: %d\ngomaxprocs: %d\nseconds-per-run: %d\nrounds: %d\nassets: %d\n", clients, gomaxprocs(), fl.secs, rounds, fl.assets)

	start := time.Now()
	fl.setup(t)
	fmt.Printf("setup: %s\n", time.Since(start).Round(time.Second))
	variants := fl.variants(t)

	results := make(map[string][]float64)
	runOne := func(label string, v floorVariant) float64 {
		fl.prepare(t, v.trigger)
		tps := v.run(t)
		fmt.Printf("%-8s %-22s %8.0f tx/s\n", label, v.name, tps)
		return tps
	}
	for _, v := range variants {
		runOne("warm-up", v)
	}
	execEach(t, fl.pool, `ANALYZE`)
	for r := range rounds {
		for i := range variants {
			v := variants[(i+r)%len(variants)]
			results[v.name] = append(results[v.name], runOne(fmt.Sprintf("round %d", r+1), v))
		}
	}

	floor := median(results[variants[0].name])
	fmt.Printf("\n| variant | tx/s per round | median | vs floor |\n|---|---|---:|---:|\n")
	for _, v := range variants {
		rs := results[v.name]
		cells := make([]string, len(rs))
		for i, x := range rs {
			cells[i] = strconv.FormatFloat(x, 'f', 0, 64)
		}
		m := median(rs)
		fmt.Printf("| %s | %s | %.0f | %.2f× |\n", v.name, strings.Join(cells, ", "), m, m/floor)
	}
}

// floorRun is TestStartFloor's database and settings.
type floorRun struct {
	url    string
	pool   *pgxpool.Pool // clients connections: repo.Start's and the harness's
	bin    string        // pgbench
	secs   int
	assets int
	dir    string // generated scripts
}

// floorVariant is one thing measured.
type floorVariant struct {
	name    string
	trigger bool // migration 0007's wake-up triggers enabled
	run     func(t *testing.T) float64
}

// setup is testdata/start-floor's setup.sql with asset ids derived from
// their number (md5(n)::uuid, as random as gen_random_uuid()), so that the
// Start script and the Go client can name the next asset without a round
// trip. The floor scripts read the same numbering from amap and aseq.
func (fl *floorRun) setup(t *testing.T) {
	execEach(t, fl.pool,
		`INSERT INTO knowledge_spaces (id, tenant_id, slug, name) VALUES ('`+floorSpace+`', '`+floorTenant+`', 'floor', 'floor')`,
		fmt.Sprintf(`INSERT INTO document_assets (id, knowledge_space_id, filename, mime_type, object_key, sha256, size_bytes, version)
			SELECT md5(g::text)::uuid, '`+floorSpace+`', 'f.md', 'text/markdown', 'k', repeat('0', 64), 1, 1
			  FROM generate_series(1, %d) g`, fl.assets),
		`CREATE TABLE amap (n bigint PRIMARY KEY, asset_id uuid NOT NULL)`,
		fmt.Sprintf(`INSERT INTO amap SELECT g, md5(g::text)::uuid FROM generate_series(1, %d) g`, fl.assets),
		`CREATE SEQUENCE aseq`,
		`VACUUM ANALYZE`)
}

// floorAsset is asset n's id, as setup made it.
func floorAsset(n int64) uuid.UUID {
	sum := md5.Sum([]byte(strconv.FormatInt(n, 10)))
	return uuid.MustParse(hex.EncodeToString(sum[:]))
}

// prepare sets the wake-up triggers (USER: the foreign keys' stay) and
// checkpoints, and fails when fewer assets are left than a run could use.
func (fl *floorRun) prepare(t *testing.T, trigger bool) {
	ddl := `ALTER TABLE document_compilation_outbox DISABLE TRIGGER USER`
	if trigger {
		ddl = `ALTER TABLE document_compilation_outbox ENABLE TRIGGER USER`
	}
	execEach(t, fl.pool, ddl, `CHECKPOINT`)
	var last int64
	if err := fl.pool.QueryRow(context.Background(), `SELECT last_value FROM aseq`).Scan(&last); err != nil {
		t.Fatal(err)
	}
	if left := int64(fl.assets) - last; left < int64(fl.secs)*5000 {
		t.Fatalf("only %d assets left for a %d s run: raise START_FLOOR_ASSETS", left, fl.secs)
	}
}

func (fl *floorRun) variants(t *testing.T) []floorVariant {
	script := func(name string) string {
		b, err := os.ReadFile(filepath.Join("testdata", "start-floor", name))
		if errors.Is(err, os.ErrNotExist) && name == "start_0007.sql" {
			return ""
		}
		if err != nil {
			t.Fatal(err)
		}
		p := filepath.Join(fl.dir, name)
		if err := os.WriteFile(p, b, 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	floor, floor2 := script("start_floor.sql"), script("start_floor_2stmt.sql")
	// The floor in one round trip, as Start on a pool: its statement without
	// BEGIN and COMMIT.
	b, err := os.ReadFile(floor)
	if err != nil {
		t.Fatal(err)
	}
	floor1 := filepath.Join(fl.dir, "start_floor_autocommit.sql")
	text := regexp.MustCompile(`(?m)^(BEGIN|COMMIT);\n`).ReplaceAllString(string(b), "")
	if err := os.WriteFile(floor1, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	before := script("start_0007.sql")
	now := fl.startScript(t)
	vs := []floorVariant{
		{name: "floor", run: func(t *testing.T) float64 { return fl.pgbench(t, floor, false) }},
		{name: "floor-2stmt", run: func(t *testing.T) float64 { return fl.pgbench(t, floor2, false) }},
		{name: "floor-autocommit", run: func(t *testing.T) float64 { return fl.pgbench(t, floor1, false) }},
		{name: "floor+trigger", trigger: true, run: func(t *testing.T) float64 { return fl.pgbench(t, floor, false) }},
	}
	if before != "" {
		vs = append(vs, floorVariant{name: "start-0007 (pgbench)", trigger: true, run: func(t *testing.T) float64 { return fl.pgbench(t, before, true) }})
	}
	return append(vs,
		floorVariant{name: "start (pgbench)", trigger: true, run: func(t *testing.T) float64 { return fl.pgbench(t, now, true) }},
		floorVariant{name: "repo.Start (Go)", trigger: true, run: fl.goStart})
}

// startScriptHead numbers the transactions of a Start script: client c's
// k-th transaction starts asset base + 8k + c (k and base set with -D).
const startScriptHead = `\set n :base + :k * ` + "8" + ` + :client_id
\set k :k + 1
`

var sqlComment = regexp.MustCompile(`(?m)--.*$`)

// startScript captures the statement repo.Start sends (on asset 1, in a
// transaction rolled back) and writes it as a pgbench script; it also
// writes a copy next to the run's output, start_now.sql.
func (fl *floorRun) startScript(t *testing.T) string {
	ctx := context.Background()
	r := repo.New(nil)
	asset := floorAsset(1)
	var attemptID, outboxID uuid.UUID
	stmts, err := captureOn(ctx, fl.url, func(tx pgx.Tx) error {
		res, err := r.Start(ctx, tx, &repo.StartParams{TenantID: floorTenant, KnowledgeSpaceID: uuid.MustParse(floorSpace),
			DocumentAssetID: asset, DocumentVersion: 1, PublicationGenerationID: uuid.New()})
		if err != nil {
			return err
		}
		if !res.Created {
			return errors.New("capture: not created")
		}
		attemptID = res.Attempt.ID
		return tx.QueryRow(ctx, `SELECT id FROM document_compilation_outbox WHERE attempt_id = $1`, attemptID).Scan(&outboxID)
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(stmts) < 1 {
		t.Fatal("capture: no statement")
	}
	st := stmts[0]
	conn, err := fl.pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	desc, err := conn.Conn().PgConn().Prepare(ctx, "", st.SQL, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(desc.ParamOIDs) != len(st.Args) {
		t.Fatalf("capture: %d parameters, %d arguments", len(desc.ParamOIDs), len(st.Args))
	}
	if strings.Contains(st.SQL, "'--") {
		t.Fatal("capture: a string literal holds --; strip comments with a real lexer")
	}
	// pgbench replaces every :name in the text, comments included.
	sql := sqlComment.ReplaceAllString(st.SQL, "")
	seen := map[string]bool{}
	for i := len(st.Args) - 1; i >= 0; i-- {
		var lit string
		switch a := st.Args[i]; {
		case reflect.DeepEqual(a, attemptID):
			lit, seen["attempt"] = "gen_random_uuid()", true
		case reflect.DeepEqual(a, outboxID):
			lit, seen["outbox"] = "gen_random_uuid()", true
		case reflect.DeepEqual(a, asset):
			lit, seen["asset"] = "md5(:n::text)::uuid", true
		default:
			var typ string
			if err := conn.QueryRow(ctx, `SELECT format_type($1, NULL)`, desc.ParamOIDs[i]).Scan(&typ); err != nil {
				t.Fatal(err)
			}
			lit = sqlLiteral(t, a) + "::" + typ
		}
		sql = regexp.MustCompile(`\$`+strconv.Itoa(i+1)+`\b`).ReplaceAllLiteralString(sql, lit)
	}
	if len(seen) != 3 {
		t.Fatalf("capture: the attempt id, outbox id and asset were not all arguments (%v)", seen)
	}
	text := startScriptHead + strings.TrimSpace(sql) + ";\n"
	p := filepath.Join(fl.dir, "start_now.sql")
	if err := os.WriteFile(p, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	if out := os.Getenv("START_FLOOR_SCRIPT_OUT"); out != "" {
		if err := os.WriteFile(out, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return p
}

// sqlLiteral writes a captured argument as an SQL literal.
func sqlLiteral(t *testing.T, a any) string {
	v := reflect.ValueOf(a)
	if !v.IsValid() || (v.Kind() == reflect.Pointer && v.IsNil()) {
		return "NULL"
	}
	if v.Kind() == reflect.Pointer {
		a = v.Elem().Interface()
	}
	switch a := a.(type) {
	case string:
		return "'" + strings.ReplaceAll(a, "'", "''") + "'"
	case uuid.UUID:
		return "'" + a.String() + "'"
	case int32, int64, int:
		return fmt.Sprint(a)
	case bool:
		return strconv.FormatBool(a)
	default:
		t.Fatalf("capture: argument of type %T", a)
		return ""
	}
}

var pgbenchTx = regexp.MustCompile(`number of transactions actually processed: ([0-9]+)`)

// pgbench runs script for fl.secs and returns its tps. A numbered script
// (startScriptHead) gets its own range of assets from aseq.
func (fl *floorRun) pgbench(t *testing.T, script string, numbered bool) float64 {
	ctx := context.Background()
	args := []string{"-n", "-c", strconv.Itoa(clients), "-j", "2", "-T", strconv.Itoa(fl.secs), "-M", "prepared"}
	var base int64
	if numbered {
		if err := fl.pool.QueryRow(ctx, `SELECT nextval('aseq')`).Scan(&base); err != nil {
			t.Fatal(err)
		}
		args = append(args, "-D", "base="+strconv.FormatInt(base, 10), "-D", "k=0")
	}
	out, err := exec.CommandContext(ctx, fl.bin, append(args, "-f", script, fl.url)...).CombinedOutput()
	if err != nil {
		t.Fatalf("pgbench %s: %v\n%s", filepath.Base(script), err, redact.Text(string(out)))
	}
	m := tpsRe.FindSubmatch(out)
	if m == nil || !strings.Contains(string(out), "number of failed transactions: 0 ") {
		t.Fatalf("pgbench %s: no tps or failed transactions:\n%s", filepath.Base(script), redact.Text(string(out)))
	}
	tps, _ := strconv.ParseFloat(string(m[1]), 64)
	if numbered {
		// Every transaction must have created its attempt, and the next run
		// starts after the highest asset this one used.
		var created, maxN int64
		if err := fl.pool.QueryRow(ctx, `SELECT count(*), coalesce(max(m.n), $1)
			  FROM amap m JOIN document_compilation_attempts a ON a.document_asset_id = m.asset_id
			 WHERE m.n >= $1`, base).Scan(&created, &maxN); err != nil {
			t.Fatal(err)
		}
		if tx := pgbenchTx.FindSubmatch(out); tx == nil || string(tx[1]) != strconv.FormatInt(created, 10) {
			t.Fatalf("pgbench %s: %d attempts created, pgbench says:\n%s", filepath.Base(script), created, out)
		}
		execEach(t, fl.pool, fmt.Sprintf(`SELECT setval('aseq', %d)`, maxN+1))
	}
	return tps
}

// goStart runs repo.Start from clients goroutines for fl.secs on the
// 8-connection pool and returns Starts per second.
func (fl *floorRun) goStart(t *testing.T) float64 {
	ctx := context.Background()
	var base int64
	if err := fl.pool.QueryRow(ctx, `SELECT nextval('aseq')`).Scan(&base); err != nil {
		t.Fatal(err)
	}
	r := repo.New(nil)
	space, gen := uuid.MustParse(floorSpace), uuid.New()
	var next, done atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, clients)
	deadline := time.Now().Add(time.Duration(fl.secs) * time.Second)
	began := time.Now()
	for range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for time.Now().Before(deadline) {
				n := base + next.Add(1) - 1
				res, err := r.Start(ctx, fl.pool, &repo.StartParams{TenantID: floorTenant, KnowledgeSpaceID: space,
					DocumentAssetID: floorAsset(n), DocumentVersion: 1, PublicationGenerationID: gen})
				if err == nil && !res.Created {
					err = fmt.Errorf("asset %d: not created", n)
				}
				if err != nil {
					errs <- err
					return
				}
				done.Add(1)
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(began)
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	execEach(t, fl.pool, fmt.Sprintf(`SELECT setval('aseq', %d)`, base+next.Load()+1))
	return float64(done.Load()) / elapsed.Seconds()
}

// median of xs (xs is not changed).
func median(xs []float64) float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	if len(s) == 0 {
		return 0
	}
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}
