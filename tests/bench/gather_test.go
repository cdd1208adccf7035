package bench

import (
	"context"
	"testing"
	"time"

	"github.com/knowledgefs/kfsdb/observe"
	"github.com/knowledgefs/kfsdb/pgsource"
)

// BenchmarkFetchesPerLease drains a backlog (insertBacklog: 2,000 due
// attempts of 20 tenants, in a database of its own) with kfsdb's worker as
// BenchmarkDrainGrowth does (pgsource, 8 slots, a handler that completes
// at once, the completer batching), with pgsource.Config.GatherWindow at
// its default, at 5 ms and off (-1), and reports the source's fetches per
// lease and leases per fetch (observe.Fetches, FetchedLeases) and the
// drain's attempts per second. It is the figure behind the window, which
// depends on the machine's scheduling; the behaviour (after a full fetch
// the next waits for the slots it served, then fetches for all) is
// tests/runtime TestDirectFetchGathersTheSlotsItServed's. Not in make
// bench: `go test -run '^$' -bench FetchesPerLease -benchtime 1x ./bench/`
// in tests/.
func BenchmarkFetchesPerLease(b *testing.B) {
	requireEnv(b)
	const tenants, backlog = 20, 2_000
	for _, c := range []struct {
		name   string
		window time.Duration
	}{
		{"window=default", 0},
		{"window=5ms", 5 * time.Millisecond},
		{"window=off", -1},
	} {
		b.Run(c.name, func(b *testing.B) {
			var counts observe.Counts
			var rate float64
			for range b.N {
				r, err := measureDrain(context.Background(), drainKfsdb(pgsource.Config{Metrics: &counts, GatherWindow: c.window}),
					tenants, backlog, 0)
				if err != nil {
					b.Fatal(err)
				}
				rate += r
			}
			fetches, leases := counts.Get(observe.Fetches), counts.Get(observe.FetchedLeases)
			b.ReportMetric(float64(fetches)/float64(max(leases, 1)), "fetches/lease")
			b.ReportMetric(float64(leases)/float64(max(fetches, 1)), "leases/fetch")
			b.ReportMetric(rate/float64(b.N), "attempts/s")
		})
	}
}
