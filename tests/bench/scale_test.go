package bench

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/knowledgefs/kfsdb/migrate"
	"github.com/knowledgefs/kfsdb/repo"
	"github.com/knowledgefs/kfsdb/tests/scratch"
	"github.com/knowledgefs/kfsdb/tests/testfactory"
)

// BenchmarkScale measures the hot statements' latency (one client, p50 and
// p99 per call) as terminal history grows: KFS_SCALE_LEVELS (default
// 0,10000,100000,1000000) historical attempts, added cumulatively to one
// database of its own. The target is p50 at 10^6 within 1.5x of the empty
// table's. Run it alone: make bench-scale.
func BenchmarkScale(b *testing.B) {
	requireEnv(b)
	levels := []int{0, 10_000, 100_000, 1_000_000}
	if v := os.Getenv("KFS_SCALE_LEVELS"); v != "" {
		levels = levels[:0]
		for _, f := range strings.Split(v, ",") {
			n, err := strconv.Atoi(strings.TrimSpace(f))
			if err != nil {
				b.Fatalf("KFS_SCALE_LEVELS: %v", err)
			}
			levels = append(levels, n)
		}
	}
	ctx := context.Background()
	name := scratch.RandomName("kfsscale")
	url, err := env.srv.CreateDatabase(ctx, name, "")
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = env.srv.DropDatabase(context.Background(), name) })
	if _, err := migrate.Up(ctx, url); err != nil {
		b.Fatal(err)
	}
	pool, err := pgxpool.New(ctx, url)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(pool.Close)
	r := repo.New(nil)
	drv := &testfactory.Driver{Repo: r, DB: pool}

	have := 0
	for _, level := range levels {
		if level > have {
			start := time.Now()
			if err := testfactory.InsertHistory(ctx, pool, level-have); err != nil {
				b.Fatal(err)
			}
			fmt.Printf("# history %d -> %d attempts in %s\n", have, level, time.Since(start).Round(time.Millisecond))
			have = level
			// Measure the settled tables a slowly growing history leaves,
			// not the aftermath of a bulk load: without this, the
			// autovacuum and checkpoint that the load triggers run during
			// the first statements timed.
			execEach(b, pool,
				"VACUUM (ANALYZE) document_compilation_attempts, document_compilation_outbox",
				"CHECKPOINT")
		}
		b.Run(fmt.Sprintf("history=%d", level), func(b *testing.B) {
			ops := []struct {
				name string
				// prepare returns the call to time.
				prepare func(b *testing.B) func() error
			}{
				{"Start", func(b *testing.B) func() error {
					s := testfactory.NewScope(ctx, b, pool, nil)
					return func() error { _, err := r.Start(ctx, pool, s.StartParams()); return err }
				}},
				{"ClaimOutbox", func(b *testing.B) func() error {
					drv.Start(ctx, b, testfactory.NewScope(ctx, b, pool, nil), nil)
					return func() error {
						_, err := r.ClaimOutbox(ctx, pool, &repo.ClaimOutboxParams{RelayID: "scale", BatchSize: 100})
						return err
					}
				}},
				{"AcquireLease", func(b *testing.B) func() error {
					a := drv.Start(ctx, b, testfactory.NewScope(ctx, b, pool, nil), nil)
					del := drv.Dispatch(ctx, b, a.ID, nil)
					return func() error {
						_, _, err := r.AcquireLease(ctx, pool, &repo.AcquireLeaseParams{Delivery: *del, WorkerID: "scale"})
						return err
					}
				}},
				{"Heartbeat", func(b *testing.B) func() error {
					_, lease, _ := drv.Running(ctx, b, testfactory.NewScope(ctx, b, pool, nil), nil)
					return func() error { _, err := r.Heartbeat(ctx, pool, &repo.HeartbeatParams{Lease: lease}); return err }
				}},
				{"PurgeBatch", func(b *testing.B) func() error {
					return func() error {
						// A tenant with nothing old enough: the cost of
						// finding the batch, which is what grows with history.
						_, err := r.Purge(ctx, pool, &repo.PurgeParams{TenantID: "history-7", CompletedBefore: time.Now().Add(-365 * 24 * time.Hour), BatchSize: 100})
						return err
					}
				}},
			}
			for _, op := range ops {
				b.Run("op="+op.name, func(b *testing.B) {
					// Park what earlier ops left due (started, or claimed
					// with a lock that has since expired), so that every
					// op's claim finds exactly its own row, at every level.
					execEach(b, pool,
						"UPDATE document_compilation_outbox SET available_at = 'infinity' WHERE status = 'pending'",
						"UPDATE document_compilation_outbox SET locked_until = 'infinity' WHERE status = 'dispatching'")
					lat := make([]time.Duration, 0, b.N)
					b.ResetTimer()
					for range b.N {
						b.StopTimer()
						call := op.prepare(b)
						b.StartTimer()
						t0 := time.Now()
						if err := call(); err != nil {
							b.Fatal(err)
						}
						lat = append(lat, time.Since(t0))
					}
					slices.Sort(lat)
					b.ReportMetric(float64(lat[len(lat)/2].Microseconds()), "p50-µs")
					b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds()), "p99-µs")
				})
			}
		})
	}
}
