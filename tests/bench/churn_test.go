package bench

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestChurn is `make bench-churn` (scripts/bench-churn.sh, KFS_CHURN=1):
// an hour of churn on one server (issue 40 item 3). It measures kfsdb's
// capacity with a short unpaced run (unless CHURN_RATE is given), then
// runs each side of CHURN_SIDES one after the other at CHURN_FRACTION of
// it for CHURN_MINUTES (variant "plain"), then each side of
// CHURN_HOLD_SIDES for CHURN_HOLD_RUN_MINUTES with a REPEATABLE READ
// transaction holding its snapshot for CHURN_HOLD_MINUTES from the middle
// (variant "held"). While a side runs, a sampler reads its database from
// outside every minute (churnSampler): sizes, tuples, autovacuum runs,
// the claim statement's plan and that minute's start → succeeded p50/p99
// at the commit. It writes minutes.csv, plans-*.txt and summary.md under
// CHURN_OUT and prints the summary. It asserts nothing about the figures:
// a measurement, not a timed test.
//
// Environment (defaults in brackets): CHURN_MINUTES [60],
// CHURN_HOLD_MINUTES [10], CHURN_HOLD_RUN_MINUTES [CHURN_MINUTES],
// CHURN_FRACTION [0.7], CHURN_RATE [unset: measured],
// CHURN_CAPACITY_SECONDS [30], CHURN_SIDES [postgres floor],
// CHURN_HOLD_SIDES [postgres floor river], CHURN_VARIANTS [plain held],
// CHURN_PRODUCERS [8], CHURN_SLOTS [8], CHURN_OUT [bench/out/churn],
// CHURN_TOGETHER [unset; 1: a variant's sides run at the same time, each
// in its own database at the rate divided among them, which fits the
// whole session in 2 h instead of 5 h 20 min];
// CHURN_FLOOR_BIN, CHURN_KFSDB_BIN and CHURN_RIVER_BIN name the floor, the
// deploy binary (the floor migrates with it) and bench/river, which the
// script builds. CHURN_MINUTE_SECONDS [60] shortens a "minute", only for
// trying the harness itself.
func TestChurn(t *testing.T) {
	if os.Getenv("KFS_CHURN") != "1" {
		t.Skip("set KFS_CHURN=1 (make bench-churn)")
	}
	requireEnv(t)
	cfg := churnConfigFromEnv(t)
	ctx := context.Background()
	if err := os.MkdirAll(cfg.out, 0o755); err != nil {
		t.Fatal(err)
	}
	var track string
	if err := env.pool.QueryRow(ctx, `SELECT current_setting('track_commit_timestamp')`).Scan(&track); err != nil || track != "on" {
		t.Fatalf("the server must run with track_commit_timestamp = on (latency at the commit), got %q (%v)", track, err)
	}
	csv, err := newChurnCSV(filepath.Join(cfg.out, "minutes.csv"))
	if err != nil {
		t.Fatal(err)
	}
	defer csv.close()

	rate, capacity := cfg.rate, 0.0
	if rate == 0 {
		res, err := cfg.runSide(ctx, t, "postgres", "capacity", 0, cfg.capacitySeconds, nil)
		if err != nil {
			t.Fatalf("capacity run: %v", err)
		}
		capacity = res.throughput
		rate = float64(int(cfg.fraction * capacity))
		if rate < 1 {
			t.Fatalf("capacity run measured %.1f attempts/s: nothing to pace", capacity)
		}
	}
	fmt.Printf("churn: rate %.0f/s (capacity %.0f/s unpaced over %d s × fraction %.2f; 0 when CHURN_RATE was given)\n",
		rate, capacity, cfg.capacitySeconds, cfg.fraction)

	var all []churnMinute
	for _, variant := range cfg.variants {
		sides, minutes, hold := cfg.sides, cfg.minutes, churnHold{start: -1, end: -1}
		if variant == "held" {
			sides, minutes = cfg.holdSides, cfg.holdRunMinutes
			hold.start = minutes / 2
			hold.end = hold.start + cfg.holdMinutes
		}
		if !cfg.together {
			for _, side := range sides {
				fmt.Printf("churn: %s %s at %.0f/s for %d min%s\n", variant, side, rate, minutes, hold.describe())
				res, err := cfg.runSide(ctx, t, side, variant, rate, minutes*cfg.minuteSeconds, &churnSampling{
					minutes: minutes, hold: hold, csv: csv,
				})
				if err != nil {
					t.Fatalf("%s %s: %v", variant, side, err)
				}
				all = append(all, res.minutes...)
			}
			continue
		}
		// Together: every side at once, each in its own database, sharing
		// the rate, so the server carries the same load as one side alone
		// and every minute's noise (autovacuum, checkpoints) hits all.
		share := float64(int(rate / float64(len(sides))))
		fmt.Printf("churn: %s %v together, each at %.0f/s for %d min%s\n", variant, sides, share, minutes, hold.describe())
		results := make([]*churnSideResult, len(sides))
		errs := make([]error, len(sides))
		var wg sync.WaitGroup
		for i, side := range sides {
			wg.Go(func() {
				results[i], errs[i] = cfg.runSide(ctx, t, side, variant, share, minutes*cfg.minuteSeconds, &churnSampling{
					minutes: minutes, hold: hold, csv: csv,
				})
			})
		}
		wg.Wait()
		for i, side := range sides {
			if errs[i] != nil {
				t.Fatalf("%s %s: %v", variant, side, errs[i])
			}
			all = append(all, results[i].minutes...)
		}
	}
	var sb strings.Builder
	writeChurnSummary(&sb, &churnSummaryInput{
		Rate: rate, Capacity: capacity, Minutes: all, HoldMinutes: cfg.holdMinutes, MinuteSeconds: cfg.minuteSeconds,
	})
	fmt.Print(sb.String())
	if err := os.WriteFile(filepath.Join(cfg.out, "summary.md"), []byte(sb.String()), 0o644); err != nil {
		t.Fatal(err)
	}
}

// churnConfig is TestChurn's environment.
type churnConfig struct {
	minutes, holdMinutes, holdRunMinutes int
	fraction, rate                       float64
	capacitySeconds, minuteSeconds       int
	sides, holdSides, variants           []string
	producers, slots                     int
	out, floorBin, kfsdbBin, riverBin    string
	adminURL                             string
	together                             bool
}

func churnConfigFromEnv(t *testing.T) *churnConfig {
	t.Helper()
	c := &churnConfig{
		minutes:         envInt(t, "CHURN_MINUTES", 60),
		holdMinutes:     envInt(t, "CHURN_HOLD_MINUTES", 10),
		capacitySeconds: envInt(t, "CHURN_CAPACITY_SECONDS", 30),
		minuteSeconds:   envInt(t, "CHURN_MINUTE_SECONDS", 60),
		producers:       envInt(t, "CHURN_PRODUCERS", 8),
		slots:           envInt(t, "CHURN_SLOTS", 8),
		sides:           strings.Fields(churnEnvString("CHURN_SIDES", "postgres floor")),
		holdSides:       strings.Fields(churnEnvString("CHURN_HOLD_SIDES", "postgres floor river")),
		variants:        strings.Fields(churnEnvString("CHURN_VARIANTS", "plain held")),
		out:             churnEnvString("CHURN_OUT", filepath.Join("..", "..", "bench", "out", "churn")),
		floorBin:        os.Getenv("CHURN_FLOOR_BIN"),
		kfsdbBin:        os.Getenv("CHURN_KFSDB_BIN"),
		riverBin:        os.Getenv("CHURN_RIVER_BIN"),
		adminURL:        os.Getenv(EnvDatabaseURL),
		together:        os.Getenv("CHURN_TOGETHER") == "1",
	}
	c.holdRunMinutes = envInt(t, "CHURN_HOLD_RUN_MINUTES", c.minutes)
	c.fraction = churnEnvFloat(t, "CHURN_FRACTION", 0.7)
	c.rate = churnEnvFloat(t, "CHURN_RATE", 0)
	if c.adminURL == "" {
		t.Fatalf("%s is required: the floor and River create their databases on that server (make bench-churn sets it)", EnvDatabaseURL)
	}
	if c.holdRunMinutes/2+c.holdMinutes >= c.holdRunMinutes {
		t.Fatalf("CHURN_HOLD_MINUTES=%d from minute %d leaves no minute to recover in CHURN_HOLD_RUN_MINUTES=%d",
			c.holdMinutes, c.holdRunMinutes/2, c.holdRunMinutes)
	}
	for _, v := range c.variants {
		if v != "plain" && v != "held" {
			t.Fatalf("CHURN_VARIANTS=%q: want plain and/or held", v)
		}
	}
	need := map[string]string{"floor": c.floorBin, "river": c.riverBin}
	for _, s := range append(append([]string{}, c.sides...), c.holdSides...) {
		switch s {
		case "postgres":
		case "floor", "river":
			if need[s] == "" || (s == "floor" && c.kfsdbBin == "") {
				t.Fatalf("side %s needs CHURN_FLOOR_BIN/CHURN_KFSDB_BIN or CHURN_RIVER_BIN (make bench-churn builds them)", s)
			}
		default:
			t.Fatalf("side %q: want postgres, floor or river", s)
		}
	}
	return c
}

func churnEnvString(name, def string) string {
	if s := os.Getenv(name); s != "" {
		return s
	}
	return def
}

func churnEnvFloat(t *testing.T, name string, def float64) float64 {
	t.Helper()
	s := os.Getenv(name)
	if s == "" {
		return def
	}
	f, err := strconv.ParseFloat(s, 64)
	if err != nil || !(f > 0) {
		t.Fatalf("%s=%q: want a number > 0", name, s)
	}
	return f
}

// churnHold is the held variant's minutes [start, end); -1 without.
type churnHold struct{ start, end int }

func (h churnHold) describe() string {
	if h.start < 0 {
		return ""
	}
	return fmt.Sprintf(", snapshot held over minutes [%d, %d)", h.start, h.end)
}

func (h churnHold) covers(minute int) bool {
	return h.start >= 0 && minute >= h.start && minute < h.end
}

// churnTimeout bounds a side's run past its own length (setup, drain).
const churnTimeout = 30 * time.Minute
