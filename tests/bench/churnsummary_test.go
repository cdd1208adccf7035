package bench

import (
	"bufio"
	"fmt"
	"io"
	"math"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// churnCSV writes minutes.csv: one line per minute per side, flushed as
// it comes (a long run can be read while it runs).
type churnCSV struct {
	mu sync.Mutex // sides sampled together write at once
	f  *os.File
	w  *bufio.Writer
}

// churnCSVTables is how many tables a line has room for (the seed's two;
// River fills the first).
const churnCSVTables = 2

func newChurnCSV(path string) (*churnCSV, error) {
	f, err := os.Create(path)
	if err != nil {
		return nil, err
	}
	c := &churnCSV{f: f, w: bufio.NewWriter(f)}
	cols := []string{"variant", "side", "minute", "end_utc", "held", "completed", "p50_ms", "p99_ms", "max_ms"}
	for i := 1; i <= churnCSVTables; i++ {
		for _, n := range []string{"table", "total_bytes", "heap_bytes", "index_bytes", "live_tuples", "dead_tuples", "autovacuum_count", "autoanalyze_count", "last_autovacuum"} {
			cols = append(cols, fmt.Sprintf("t%d_%s", i, n))
		}
	}
	cols = append(cols, "plan", "plan_changed")
	fmt.Fprintln(c.w, strings.Join(cols, ","))
	return c, c.w.Flush()
}

func (c *churnCSV) write(m *churnMinute) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	fields := []string{m.Variant, m.Side, fmt.Sprint(m.Minute), m.End.UTC().Format(time.RFC3339), churnBool(m.Held),
		fmt.Sprint(m.Completed), fmt.Sprintf("%.2f", m.P50), fmt.Sprintf("%.2f", m.P99), fmt.Sprintf("%.2f", m.Max)}
	for i := range churnCSVTables {
		var t churnTable
		if i < len(m.Tables) {
			t = m.Tables[i]
		}
		fields = append(fields, t.Name, fmt.Sprint(t.Total), fmt.Sprint(t.Heap), fmt.Sprint(t.Indexes), fmt.Sprint(t.Live),
			fmt.Sprint(t.Dead), fmt.Sprint(t.Autovacuums), fmt.Sprint(t.Autoanalyzes), t.LastAutovacuum)
	}
	fields = append(fields, m.Plan, churnBool(m.PlanChanged))
	fmt.Fprintln(c.w, strings.Join(fields, ","))
	return c.w.Flush()
}

func (c *churnCSV) close() { _ = c.f.Close() }

func churnBool(b bool) string {
	if b {
		return "1"
	}
	return "0"
}

// churnSummaryInput is every sampled minute of a session and its load.
type churnSummaryInput struct {
	Rate, Capacity float64
	Minutes        []churnMinute
	HoldMinutes    int
	MinuteSeconds  int
}

// churnGoalRatio is the goal: each minute's p99 within 2× of the
// floor's p99 in the same minute of its run.
const churnGoalRatio = 2.0

// churnRecoveredRatio: a minute after the hold is back when its p99 is
// within 1.2× of the median p99 of the minutes before the hold.
const churnRecoveredRatio = 1.2

// churnEdgeMinutes is how many minutes at each end the plateau check
// compares (fewer when the run is short: a third of it).
const churnEdgeMinutes = 10

// writeChurnSummary writes the session's summary (markdown): per side of
// the plain variant, sizes (growth over the last minutes against the
// first), dead tuples, autovacuum runs, plan changes, the p99 per minute
// against the floor's and the worst minute; per side of the held variant,
// the degradation while held and the minutes to recover.
func writeChurnSummary(w io.Writer, in *churnSummaryInput) {
	fmt.Fprintf(w, "\n## Churn summary: %.0f attempts/s", in.Rate)
	if in.Capacity > 0 {
		fmt.Fprintf(w, " (capacity %.0f/s, kfsdb direct unpaced)", in.Capacity)
	}
	fmt.Fprintf(w, ", minute = %d s\n", in.MinuteSeconds)
	plain := churnBySide(in.Minutes, "plain")
	if len(plain) > 0 {
		fmt.Fprintln(w, "\n### Plain (server's default autovacuum)")
		fmt.Fprintln(w, "\n| side | minutes | completed/min (median) | p50 ms (median) | p99 ms (median) | worst minute: p99 ms | size first→last MB | growth last/first | bytes per live row first→last | dead tuples max | autovacuums | plan changes |")
		fmt.Fprintln(w, "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
		for _, side := range churnSides(in.Minutes, "plain") {
			ms := plain[side]
			s := churnSizes(ms)
			worst := churnWorst(ms)
			fmt.Fprintf(w, "| %s | %d | %.0f | %.1f | %.1f | %d: %.1f | %.1f→%.1f | %.2f | %.0f→%.0f | %d | %d | %d |\n", side, len(ms),
				churnMedian(ms, func(m churnMinute) float64 { return float64(m.Completed) }),
				churnMedian(ms, func(m churnMinute) float64 { return m.P50 }), churnMedian(ms, func(m churnMinute) float64 { return m.P99 }),
				worst.Minute, worst.P99, s.firstMB, s.lastMB, s.growthRatio, s.firstPerRow, s.lastPerRow, s.maxDead, s.autovacuums, churnPlanChanges(ms))
		}
		if floor := plain["floor"]; len(floor) > 0 {
			fmt.Fprintln(w, "\n| side | minutes compared | worst minute vs floor's same minute | minutes over 2× | goal (p99 within 2× of the floor's every minute) |")
			fmt.Fprintln(w, "|---|---:|---|---:|---|")
			for _, side := range churnSides(in.Minutes, "plain") {
				if side == "floor" {
					continue
				}
				c := churnVsFloor(plain[side], floor)
				verdict := "met"
				if c.over > 0 {
					verdict = fmt.Sprintf("missed in %d minute(s)", c.over)
				}
				fmt.Fprintf(w, "| %s | %d | minute %d: %.1f vs %.1f ms = %.2f× | %d | %s |\n", side, c.compared, c.worstMinute, c.side, c.floor, c.worstRatio, c.over, verdict)
			}
		}
		fmt.Fprintf(w, "\ngrowth last/first: total size (every index and TOAST) of the side's hot tables grown over the last k minutes against the first k (k = %d, or a third of a shorter run; ≤ 0.5: levelling off; ~1: growing steadily, as terminal rows are kept).\n", churnEdgeMinutes)
	}
	held := churnBySide(in.Minutes, "held")
	if len(held) > 0 {
		fmt.Fprintf(w, "\n### Held snapshot (%d min from the middle)\n", in.HoldMinutes)
		fmt.Fprintln(w, "\n| side | p99 ms before (median) | p99 ms held (median / max) | max held / before | dead tuples before → held max → end | minutes to recover (p99 ≤ 1.2× before) | held max p99 vs floor's |")
		fmt.Fprintln(w, "|---|---:|---:|---:|---|---|---:|")
		floor := churnHeldFigures(held["floor"])
		for _, side := range churnSides(in.Minutes, "held") {
			h := churnHeldFigures(held[side])
			rec := "not within the run"
			if h.recovered >= 0 {
				rec = fmt.Sprint(h.recovered)
			}
			vsFloor := "-"
			if side != "floor" && floor.heldMax > 0 {
				vsFloor = fmt.Sprintf("%.2f×", h.heldMax/floor.heldMax)
			}
			fmt.Fprintf(w, "| %s | %.1f | %.1f / %.1f | %.2f× | %d → %d → %d | %s | %s |\n", side, h.before, h.heldMedian, h.heldMax,
				churnRatio(h.heldMax, h.before), h.deadBefore, h.deadHeldMax, h.deadEnd, rec, vsFloor)
		}
		fmt.Fprintln(w, "\nminutes to recover: counted from the snapshot's release to the end of the first minute whose p99 is within 1.2× of the median p99 before the hold.")
	}
}

func churnBySide(all []churnMinute, variant string) map[string][]churnMinute {
	out := map[string][]churnMinute{}
	for _, m := range all {
		if m.Variant == variant {
			out[m.Side] = append(out[m.Side], m)
		}
	}
	return out
}

// churnSides are a variant's sides in the order they ran.
func churnSides(all []churnMinute, variant string) []string {
	var out []string
	for _, m := range all {
		if m.Variant == variant && !slices.Contains(out, m.Side) {
			out = append(out, m.Side)
		}
	}
	return out
}

func churnMedian(ms []churnMinute, f func(churnMinute) float64) float64 {
	if len(ms) == 0 {
		return 0
	}
	v := make([]float64, len(ms))
	for i, m := range ms {
		v[i] = f(m)
	}
	slices.Sort(v)
	if len(v)%2 == 1 {
		return v[len(v)/2]
	}
	return (v[len(v)/2-1] + v[len(v)/2]) / 2
}

func churnWorst(ms []churnMinute) churnMinute {
	var w churnMinute
	for i, m := range ms {
		if i == 0 || m.P99 > w.P99 {
			w = m
		}
	}
	return w
}

func churnRatio(a, b float64) float64 {
	if b <= 0 {
		return math.Inf(1)
	}
	return a / b
}

func churnTotal(m churnMinute) (bytes, live, dead int64) {
	for _, t := range m.Tables {
		bytes, live, dead = bytes+t.Total, live+t.Live, dead+t.Dead
	}
	return bytes, live, dead
}

type churnSizeFigures struct {
	firstMB, lastMB, growthRatio float64
	firstPerRow, lastPerRow      float64
	maxDead, autovacuums         int64
}

// churnSizes compares the hot tables' growth over the last k minutes with
// the first k (k = churnEdgeMinutes, or a third of a shorter run).
func churnSizes(ms []churnMinute) churnSizeFigures {
	var s churnSizeFigures
	if len(ms) == 0 {
		return s
	}
	size := func(i int) float64 { b, _, _ := churnTotal(ms[i]); return float64(b) }
	perRow := func(i int) float64 { b, l, _ := churnTotal(ms[i]); return float64(b) / float64(max(l, 1)) }
	n := len(ms)
	s.firstMB, s.lastMB = size(0)/(1<<20), size(n-1)/(1<<20)
	s.firstPerRow, s.lastPerRow = perRow(0), perRow(n-1)
	k := min(churnEdgeMinutes, n/3)
	s.growthRatio = math.NaN()
	if k > 0 {
		s.growthRatio = churnRatio(size(n-1)-size(n-1-k), size(k)-size(0))
	}
	for _, m := range ms {
		_, _, d := churnTotal(m)
		s.maxDead = max(s.maxDead, d)
	}
	for i := range ms[n-1].Tables {
		s.autovacuums += ms[n-1].Tables[i].Autovacuums
		if i < len(ms[0].Tables) {
			s.autovacuums -= ms[0].Tables[i].Autovacuums
		}
	}
	return s
}

func churnPlanChanges(ms []churnMinute) int {
	n := 0
	for _, m := range ms {
		if m.PlanChanged {
			n++
		}
	}
	return n
}

type churnFloorComparison struct {
	compared, worstMinute, over int
	side, floor, worstRatio     float64
}

// churnVsFloor pairs a side's minutes with the floor's by their index in
// the run (both ran the same load for the same minutes, one after the
// other).
func churnVsFloor(side, floor []churnMinute) churnFloorComparison {
	var c churnFloorComparison
	c.compared = min(len(side), len(floor))
	for i := range c.compared {
		r := churnRatio(side[i].P99, floor[i].P99)
		if i == 0 || r > c.worstRatio {
			c.worstRatio, c.worstMinute, c.side, c.floor = r, i, side[i].P99, floor[i].P99
		}
		if r > churnGoalRatio {
			c.over++
		}
	}
	return c
}

type churnHeld struct {
	before, heldMedian, heldMax      float64
	deadBefore, deadHeldMax, deadEnd int64
	recovered                        int // minutes; -1: not within the run
}

// churnHeldFigures reads a held run: its minutes before, during and after
// the hold (Held marks the held ones).
func churnHeldFigures(ms []churnMinute) churnHeld {
	h := churnHeld{recovered: -1}
	start, end := -1, -1
	for i, m := range ms {
		if m.Held {
			if start < 0 {
				start = i
			}
			end = i + 1
		}
	}
	if start < 0 {
		return h
	}
	h.before = churnMedian(ms[:start], func(m churnMinute) float64 { return m.P99 })
	h.heldMedian = churnMedian(ms[start:end], func(m churnMinute) float64 { return m.P99 })
	h.heldMax = churnWorst(ms[start:end]).P99
	if start > 0 {
		_, _, h.deadBefore = churnTotal(ms[start-1])
	}
	for _, m := range ms[start:end] {
		_, _, d := churnTotal(m)
		h.deadHeldMax = max(h.deadHeldMax, d)
	}
	_, _, h.deadEnd = churnTotal(ms[len(ms)-1])
	for i := end; i < len(ms); i++ {
		if ms[i].P99 <= churnRecoveredRatio*h.before {
			h.recovered = i - end + 1
			break
		}
	}
	return h
}

// TestChurnSummary checks the summary's arithmetic on made-up minutes
// (no server): the plateau ratio, the floor comparison and the recovery.
func TestChurnSummary(t *testing.T) {
	mk := func(variant, side string, p99 []float64, sizes []int64, held func(int) bool) []churnMinute {
		out := make([]churnMinute, len(p99))
		for i := range p99 {
			out[i] = churnMinute{Variant: variant, Side: side, Minute: i, P99: p99[i], Held: held(i),
				Tables: []churnTable{{Name: "a", Total: sizes[i], Live: 100, Dead: int64(10 * i)}}}
		}
		return out
	}
	never := func(int) bool { return false }
	sizes := []int64{100, 200, 300, 350, 370, 380, 385, 388, 390}
	side := mk("plain", "postgres", []float64{4, 5, 30, 6, 5, 4, 5, 6, 5}, sizes, never)
	floor := mk("plain", "floor", []float64{3, 3, 20, 3, 3, 3, 2, 3, 3}, sizes, never)

	s := churnSizes(side)
	// k = 3: last growth 390-380 = 10, first 350-100 = 250.
	if want := 10.0 / 250; math.Abs(s.growthRatio-want) > 1e-9 {
		t.Errorf("growth ratio %v, want %v", s.growthRatio, want)
	}
	c := churnVsFloor(side, floor)
	if c.worstMinute != 6 || c.worstRatio != 2.5 || c.over != 1 {
		t.Errorf("vs floor: %+v, want worst minute 6 at 2.5× and one minute over 2×", c)
	}

	heldMinutes := func(i int) bool { return i >= 3 && i < 5 }
	h := churnHeldFigures(mk("held", "postgres", []float64{4, 6, 5, 20, 40, 9, 5.9, 5}, sizes, heldMinutes))
	// before: median(4, 6, 5) = 5; back at minute 6 (5.9 ≤ 6), 2 minutes after the release.
	if h.before != 5 || h.heldMax != 40 || h.recovered != 2 || h.deadBefore != 20 || h.deadHeldMax != 40 {
		t.Errorf("held: %+v, want before 5, held max 40, recovered after 2, dead 20 → 40", h)
	}
	never2 := churnHeldFigures(mk("held", "floor", []float64{4, 6, 5, 20, 40, 9, 8, 7}, sizes, heldMinutes))
	if never2.recovered != -1 {
		t.Errorf("held without recovery: recovered %d, want -1", never2.recovered)
	}

	var sb strings.Builder
	writeChurnSummary(&sb, &churnSummaryInput{Rate: 100, Minutes: append(side, floor...), HoldMinutes: 2, MinuteSeconds: 60})
	if !strings.Contains(sb.String(), "missed in 1 minute(s)") {
		t.Errorf("summary does not report the minute over 2×:\n%s", sb.String())
	}
}
