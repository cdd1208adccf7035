package bench

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/knowledgefs/kfsdb/migrate"
	"github.com/knowledgefs/kfsdb/outcomes"
	"github.com/knowledgefs/kfsdb/repo"
)

// outcomesVersion is the migration that adds the outcome notification.
const outcomesVersion = 12

// notifyModes are the states of migration 0012's trigger compared.
var notifyModes = []string{"absent", "off", "on"}

// BenchmarkOutcomeNotify measures what migration 0012's trigger costs a
// terminal transition, in one run: notify=absent (the migration rolled
// back), notify=off (applied: the trigger disabled, as it ships) and
// notify=on (enabled), for a control-plane end (Cancel), a worker's
// (Complete) and the most frequent update that ends nothing (Heartbeat:
// a row trigger on the table, even a disabled one, makes every UPDATE of
// it fetch the old row for the trigger machinery), 8 clients, each
// operation on its own fixture attempt. In every mode a session LISTENs
// on kfsdb_outcomes and drains it, so that only the trigger differs; the
// benchmark checks it heard one notification per end when on and none
// otherwise. Run it several times with -count=1 (as make bench runs its
// benchmarks) so that the modes interleave (absent, off, on, absent, …;
// -count=N would run each mode N times in a row); compare with
// `benchstat -col /notify`. The figures are in docs/PERFORMANCE.md.
func BenchmarkOutcomeNotify(b *testing.B) {
	requireEnv(b)
	for _, tr := range transitions {
		if tr.name != "Heartbeat" && tr.name != "Cancel" && tr.name != "Complete" {
			continue
		}
		b.Run("op="+tr.name, func(b *testing.B) {
			for _, mode := range notifyModes {
				b.Run("notify="+mode, func(b *testing.B) { benchOutcomeNotify(b, &tr, mode) })
			}
		})
	}
	// Leave the database as the migrations do.
	setNotifyMode(b, "off")
}

func benchOutcomeNotify(b *testing.B, tr *transition, mode string) {
	ctx := context.Background()
	r := repo.New(nil)
	// One fixture more than the operations: the last is the one whose
	// plan is read (and rolled back) after them.
	fs := setupFixtures(b, b.N+1, tr.from)
	setNotifyMode(b, mode)
	heard := listenOutcomes(b)
	sql, args := captureTransition(b, tr, r, fs)
	runParallel(b, func(ctx context.Context, i int) error { return tr.call(ctx, r, env.pool, fs, &fs.Items[i]) })
	b.ReportMetric(float64(statementBuffers(b, sql, args[b.N])), "buffers/op")

	want := 0
	if mode == "on" && tr.name != "Heartbeat" {
		want = b.N
	}
	if got := heard(); got != want {
		b.Fatalf("notify=%s: %d notifications for %d %s calls, want %d", mode, got, b.N, tr.name, want)
	}
	var done int
	if err := env.pool.QueryRow(ctx, tr.done).Scan(&done); err != nil {
		b.Fatal(err)
	}
	if done != b.N {
		b.Fatalf("%s: %d attempts transitioned, want %d", tr.name, done, b.N)
	}
}

// setNotifyMode puts migration 0012's trigger in mode: absent (rolled
// back), off or on.
func setNotifyMode(b *testing.B, mode string) {
	b.Helper()
	ctx := context.Background()
	db, err := migrate.OpenSQL(ctx, env.url)
	if err != nil {
		b.Fatal(err)
	}
	p, err := migrate.NewProvider(db)
	if err != nil {
		b.Fatal(err)
	}
	defer func() { _ = p.Close() }()
	if mode == "absent" {
		if _, err := p.DownTo(ctx, outcomesVersion-1); err != nil {
			b.Fatal(err)
		}
		return
	}
	if _, err := p.Up(ctx); err != nil {
		b.Fatal(err)
	}
	set := outcomes.Disable
	if mode == "on" {
		set = outcomes.Enable
	}
	if err := set(ctx, env.pool, 0); err != nil {
		b.Fatal(err)
	}
}

// listenOutcomes LISTENs on kfsdb_outcomes on a connection of its own
// (not one of the clients') and counts what it hears; heard ends the
// listening once it has heard a closing notification sent after the
// operations (so every earlier one is in) and returns the count.
func listenOutcomes(b *testing.B) (heard func() int) {
	b.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, env.url)
	if err != nil {
		b.Fatal(err)
	}
	if _, err := conn.Exec(ctx, "LISTEN "+outcomes.Channel); err != nil {
		b.Fatal(err)
	}
	const closing = "bench: closing"
	count := make(chan int, 1)
	go func() {
		defer func() { _ = conn.Close(context.Background()) }()
		n := 0
		for {
			wctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
			note, err := conn.WaitForNotification(wctx)
			cancel()
			if err != nil {
				count <- -1
				return
			}
			if note.Payload == closing {
				count <- n
				return
			}
			n++
		}
	}()
	return func() int {
		if _, err := env.pool.Exec(ctx, `SELECT pg_notify($1, $2)`, outcomes.Channel, closing); err != nil {
			b.Fatal(err)
		}
		return <-count
	}
}

// statementBuffers runs sql with args under EXPLAIN (ANALYZE, BUFFERS) in
// a transaction it rolls back, and returns the shared buffers its plan
// touched (hit or read): a count that does not depend on the machine's
// load. A row trigger on the table, even a disabled one, adds the fetch
// of each updated row's old version for the trigger machinery.
func statementBuffers(b *testing.B, sql string, args []any) int64 {
	b.Helper()
	ctx := context.Background()
	tx, err := env.pool.Begin(ctx)
	if err != nil {
		b.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	var plans []struct {
		Plan struct {
			Hit  int64 `json:"Shared Hit Blocks"`
			Read int64 `json:"Shared Read Blocks"`
		}
	}
	if err := tx.QueryRow(ctx, "EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) "+sql, args...).Scan(&plans); err != nil {
		b.Fatal(err)
	}
	if len(plans) != 1 {
		b.Fatalf("EXPLAIN returned %d plans", len(plans))
	}
	return plans[0].Plan.Hit + plans[0].Plan.Read
}
