package bench

import (
	"context"
	"flag"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"testing"
	"time"
)

// EnvPgbenchSeconds sets pgbench's -T. Defaults to 10.
const EnvPgbenchSeconds = "KFS_BENCH_PGBENCH_SECONDS"

var tpsRe = regexp.MustCompile(`tps = ([0-9.]+) \(without initial connection time\)`)

// BenchmarkPgbench runs pgbench (if on PATH) against the same server and
// database for reference, -c 8 -j 2 -M prepared: NarrowUpdate, a
// single-row UPDATE of a narrow table (int primary key, one int column,
// 100,000 rows) in its own implicit transaction, and SeedHeartbeat, the
// seed schema's heartbeat shape (below). One pgbench run per benchmark
// run, whatever b.N; tx/s is pgbench's tps and ns/op its inverse.
func BenchmarkPgbench(b *testing.B) {
	requireEnv(b)
	bin, err := exec.LookPath("pgbench")
	if err != nil {
		b.Skip("pgbench not on PATH")
	}
	secs := 10
	if s := os.Getenv(EnvPgbenchSeconds); s != "" {
		if secs, err = strconv.Atoi(s); err != nil || secs < 1 {
			b.Fatalf("%s=%q: want seconds > 0", EnvPgbenchSeconds, s)
		}
	}
	ctx := context.Background()
	execEach(b, env.pool,
		`DROP TABLE IF EXISTS bench_narrow`,
		`CREATE TABLE bench_narrow (id integer PRIMARY KEY, v integer NOT NULL)`,
		`INSERT INTO bench_narrow SELECT g, 0 FROM generate_series(1, 100000) g`,
		`VACUUM ANALYZE bench_narrow`)
	_, _ = env.pool.Exec(ctx, `CHECKPOINT`) // best effort: needs superuser or pg_checkpoint
	dir := b.TempDir()
	narrow := filepath.Join(dir, "narrow_update.sql")
	if err := os.WriteFile(narrow, []byte("\\set id random(1, 100000)\nUPDATE bench_narrow SET v = v + 1 WHERE id = :id;\n"), 0o600); err != nil {
		b.Fatal(err)
	}
	b.Run("op=NarrowUpdate/impl=pgbench", func(b *testing.B) {
		if !probing(b) {
			runPgbench(b, bin, secs, narrow)
		}
	})

	// The seed schema's own ceiling for a transition, by the same client:
	// a heartbeat-shaped update of an attempt and its outbox row in one
	// statement (as measurements.md's "both rows" shape), on 100,000
	// running attempts. pgbench picks the attempt by number through
	// bench_running, a two-column lookup table.
	heartbeat := filepath.Join(dir, "seed_heartbeat.sql")
	if err := os.WriteFile(heartbeat, []byte(`\set n random(1, 100000)
WITH a AS (
  UPDATE document_compilation_attempts a
     SET lease_expires_at = now() + interval '1 hour', heartbeat_at = now(),
         row_version = a.row_version + 1, updated_at = now()
    FROM bench_running r
   WHERE r.n = :n AND a.id = r.attempt_id AND a.run_state = 'running'
     AND a.worker_id = '`+benchWorker+`' AND a.lease_token = r.lease_token
     AND a.lease_expires_at > now()
  RETURNING a.id)
UPDATE document_compilation_outbox o
   SET available_at = now() + interval '1 hour', updated_at = now()
  FROM a
 WHERE o.attempt_id = a.id AND o.status = 'leased';
`), 0o600); err != nil {
		b.Fatal(err)
	}
	b.Run("op=SeedHeartbeat/impl=pgbench", func(b *testing.B) {
		if probing(b) {
			return
		}
		conn, err := env.pool.Acquire(ctx)
		if err != nil {
			b.Fatal(err)
		}
		_, err = makeFixtures(ctx, conn.Conn(), 100_000, state{"running", "parsed"})
		if err == nil {
			_, err = conn.Exec(ctx, `DROP TABLE IF EXISTS bench_running;
				CREATE TABLE bench_running AS
				  SELECT row_number() OVER (ORDER BY id)::integer AS n, id AS attempt_id, lease_token
				    FROM document_compilation_attempts;
				ALTER TABLE bench_running ADD PRIMARY KEY (n);
				ANALYZE bench_running`)
		}
		conn.Release()
		if err != nil {
			b.Fatal(err)
		}
		runPgbench(b, bin, secs, heartbeat)
		if _, err := env.pool.Exec(ctx, `DROP TABLE bench_running`); err != nil {
			b.Fatal(err)
		}
	})
	if _, err := env.pool.Exec(ctx, `DROP TABLE bench_narrow`); err != nil {
		b.Fatal(err)
	}
}

// probing reports the b.N = 1 run that precedes the real one (unless
// -benchtime=1x asked for exactly that): pgbench runs once, in the real one.
func probing(b *testing.B) bool {
	f := flag.Lookup("test.benchtime")
	return b.N == 1 && (f == nil || f.Value.String() != "1x")
}

// runPgbench runs script with pgbench -c clients -j 2 -T secs -M prepared
// on the bench database and reports its tps as tx/s (ns/op its inverse).
func runPgbench(b *testing.B, bin string, secs int, script string) {
	cmd := exec.CommandContext(context.Background(), bin, "-n", "-c", strconv.Itoa(clients), "-j", "2", "-T", strconv.Itoa(secs),
		"-M", "prepared", "-f", script, env.url)
	out, err := cmd.CombinedOutput()
	if err != nil {
		b.Fatalf("pgbench: %v\n%s", err, out)
	}
	m := tpsRe.FindSubmatch(out)
	if m == nil {
		b.Fatalf("pgbench: no tps in output:\n%s", out)
	}
	tps, _ := strconv.ParseFloat(string(m[1]), 64)
	b.ReportMetric(float64(time.Second)/tps, "ns/op")
	b.ReportMetric(tps, "tx/s")
}
