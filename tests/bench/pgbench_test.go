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
// database for reference: a single-row UPDATE of a narrow table (int
// primary key, one int column, 100,000 rows) in its own implicit
// transaction, -c 8 -j 2 -M prepared. One pgbench run per benchmark run,
// whatever b.N; tx/s is pgbench's tps and ns/op its inverse.
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
	for _, s := range []string{
		`DROP TABLE IF EXISTS bench_narrow`,
		`CREATE TABLE bench_narrow (id integer PRIMARY KEY, v integer NOT NULL)`,
		`INSERT INTO bench_narrow SELECT g, 0 FROM generate_series(1, 100000) g`,
		`VACUUM ANALYZE bench_narrow`,
		`CHECKPOINT`,
	} {
		if _, err := env.pool.Exec(ctx, s); err != nil && s != "CHECKPOINT" {
			b.Fatal(err)
		}
	}
	script := filepath.Join(b.TempDir(), "narrow_update.sql")
	if err := os.WriteFile(script, []byte("\\set id random(1, 100000)\nUPDATE bench_narrow SET v = v + 1 WHERE id = :id;\n"), 0o600); err != nil {
		b.Fatal(err)
	}
	b.Run("op=NarrowUpdate/impl=pgbench", func(b *testing.B) {
		if f := flag.Lookup("test.benchtime"); b.N == 1 && (f == nil || f.Value.String() != "1x") {
			return // the probing run; pgbench runs once, in the real one
		}
		cmd := exec.CommandContext(ctx, bin, "-n", "-c", strconv.Itoa(clients), "-j", "2", "-T", strconv.Itoa(secs),
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
	})
	if _, err := env.pool.Exec(ctx, `DROP TABLE bench_narrow`); err != nil {
		b.Fatal(err)
	}
}
