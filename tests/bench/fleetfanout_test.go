package bench

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/knowledgefs/kfsdb/observe"
	"github.com/knowledgefs/kfsdb/relay"
)

// fanout measures Start with n idle listening processes: FLEET_FANOUT_STARTS
// Starts one at a time FLEET_FANOUT_GAP apart (every process asleep on
// LISTEN between them), then FLEET_FANOUT_SECONDS unpaced (8 producers at
// once: commits that check side by side) until the fleet has drained
// them. Where each phase's fetches come from is counted three ways over
// its window (wakeWindow): the notifications by kind, the processes'
// counts of what ended each of their sleeps, and which transactions held
// the idle registrations when a commit found none it could take and woke
// everyone.
func (b *fleetBench) fanout(t *testing.T, wake string, n int, spec procSpec) {
	t.Helper()
	ctx := context.Background()
	ft := b.tenant(t, b.c.fanoutStarts+b.c.fanoutSeconds*5000+1000)
	var procs []*workerProc
	if n > 0 {
		spec.metrics = true
		procs = startFleet(t, n, spec)
		defer stopFleet(procs)
		time.Sleep(3 * time.Second)
	}
	w := b.beginWakeWindow(t, procs)
	var lat []time.Duration
	for range b.c.fanoutStarts {
		dt, _, err := b.start(ctx, ft)
		if err != nil {
			t.Fatal(err)
		}
		lat = append(lat, dt)
		time.Sleep(b.c.fanoutGap)
	}
	time.Sleep(time.Second)
	paced := w.end(t)

	w = b.beginWakeWindow(t, procs)
	t1 := time.Now()
	burst := b.produce(t, ft, 0, time.Duration(b.c.fanoutSeconds)*time.Second)
	tput := float64(len(burst)) / time.Since(t1).Seconds()
	if n == 0 {
		// Nobody runs them: take them out of the outbox, so that the next
		// measurement's processes do not.
		if _, err := b.pool.Exec(ctx, `DELETE FROM document_compilation_outbox o USING document_compilation_attempts a
			WHERE a.id = o.attempt_id AND a.tenant_id = $1`, ft.id); err != nil {
			t.Fatal(err)
		}
	} else if !b.drain(t, ft, 2*time.Minute) {
		t.Errorf("fanout %d: attempts left unfinished", n)
	}
	unpaced := w.end(t)

	perProc := 0.0
	if n > 0 {
		perProc = float64(paced.calls["FetchLeases"]) / float64(len(lat)) / float64(n)
	}
	line := fmt.Sprintf("fanout wakeups=%s listeners=%d starts=%d gap=%s start_p50_ms=%.2f start_p99_ms=%.2f wakeups_per_start_per_process=%.2f %s "+
		"unpaced_starts=%d unpaced_starts_per_s=%.0f unpaced_start_p99_ms=%.2f %s",
		wake, n, len(lat), b.c.fanoutGap, ms(pct(lat, 0.5)), ms(pct(lat, 0.99)), perProc, paced.fields("", len(lat)),
		len(burst), tput, ms(pct(burst, 0.99)), unpaced.fields("unpaced_", len(burst)))
	fmt.Println(line)
	b.lines = append(b.lines, line)
}

// wakeWindow counts what a phase of fanout woke: begun before it, ended
// after it.
type wakeWindow struct {
	b      *fleetBench
	procs  []*workerProc
	before map[observe.Counter]float64
	notes  *payloadCounter
	t0     time.Time
	// scraped is the middle of the scrape before.
	scraped time.Time
	// fallbacks reads the fallbacks' records (diagnoseFallbacks), nil
	// with FLEET_FANOUT_DIAGNOSE=0.
	fallbacks func(*testing.T) []string
}

// wakeCounts is what a wakeWindow counted.
type wakeCounts struct {
	window time.Duration
	// scrapes is the time between the middles of the scrapes before and
	// after: the processes' counters' window, a little longer than the
	// statements'.
	scrapes         time.Duration
	calls           map[string]int64
	named, everyone int
	distinct        int
	delta           map[observe.Counter]float64
	held            []string
}

func (b *fleetBench) beginWakeWindow(t *testing.T, procs []*workerProc) *wakeWindow {
	t.Helper()
	w := &wakeWindow{b: b, procs: procs}
	if envString("FLEET_FANOUT_DIAGNOSE", "1") != "0" {
		w.fallbacks = b.diagnoseFallbacks(t)
	}
	begin := time.Now()
	w.before = scrapeFleet(t, procs)
	w.scraped = begin.Add(time.Since(begin) / 2)
	w.notes = b.countPayloads(t)
	b.resetStatements(t)
	w.t0 = b.serverNow(t)
	return w
}

func (w *wakeWindow) end(t *testing.T) *wakeCounts {
	t.Helper()
	c := &wakeCounts{window: w.b.serverNow(t).Sub(w.t0), calls: w.b.callsByName(t), delta: map[observe.Counter]float64{}}
	c.named, c.everyone, c.distinct = w.notes.stop(t)
	begin := time.Now()
	after := scrapeFleet(t, w.procs)
	c.scrapes = begin.Add(time.Since(begin) / 2).Sub(w.scraped)
	for k, v := range after {
		c.delta[k] = v - w.before[k]
	}
	if w.fallbacks != nil {
		c.held = w.fallbacks(t)
	}
	return c
}

// fields formats the counts per Start (starts of them), each name
// prefixed with prefix. Idle polls are the fleet's idle cost (one per
// PollInterval per idle process, whatever the Starts): fetches are given
// with and without them, the polls taken at the rate the counters saw
// over the statements' window.
func (c *wakeCounts) fields(prefix string, starts int) string {
	per := func(v float64) float64 { return v / float64(max(starts, 1)) }
	d := c.delta
	polls := d[observe.SourceIdlePolls]
	causes := d[observe.SourceWokenNamed] + d[observe.SourceWokenAll] + polls + d[observe.SourceShortWaits] + d[observe.SourceRechecks]
	if c.scrapes > c.window {
		polls *= c.window.Seconds() / c.scrapes.Seconds()
	}
	fetches := float64(c.calls["FetchLeases"])
	return strings.NewReplacer("@", prefix).Replace(fmt.Sprintf("@window_s=%.1f @scrapes_s=%.1f @fetches_per_start=%.2f @idle_polls_per_start=%.2f @idle_polls_per_s=%.1f "+
		"@fetches_per_start_less_idle_polls=%.2f @notify_named_per_start=%.2f @notify_everyone_per_start=%.2f @listeners_named=%d "+
		"@woken_named_per_start=%.2f @woken_all_per_start=%.2f @short_waits_per_start=%.2f @rechecks_per_start=%.2f @other_fetches_per_start=%.2f "+
		"@registrations_per_start=%.2f @leases_per_fetch=%.2f @fallbacks=%d @fallback_holders=%s",
		c.window.Seconds(), c.scrapes.Seconds(), per(fetches), per(polls), polls/c.window.Seconds(), per(fetches-polls),
		per(float64(c.named)), per(float64(c.everyone)), c.distinct,
		per(d[observe.SourceWokenNamed]), per(d[observe.SourceWokenAll]), per(d[observe.SourceShortWaits]), per(d[observe.SourceRechecks]),
		per(d[observe.Fetches]-causes), per(float64(c.calls["OutboxListenerIdle"])),
		d[observe.FetchedLeases]/max(d[observe.Fetches], 1), len(c.held), holderSummary(c.held)))
}

// callsByName are pg_stat_statements' calls since the reset in this
// database, by sqlc query name ("-- name: X"; "" for the rest).
func (b *fleetBench) callsByName(t *testing.T) map[string]int64 {
	t.Helper()
	rows, err := b.pool.Query(context.Background(), `SELECT coalesce(substring(s.query from '^-- name: (\w+)'), ''), sum(s.calls)::bigint
		FROM pg_stat_statements s JOIN pg_database d ON d.oid = s.dbid WHERE d.datname = current_database() GROUP BY 1`)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]int64{}
	for rows.Next() {
		var name string
		var n int64
		if err := rows.Scan(&name, &n); err != nil {
			t.Fatal(err)
		}
		out[name] += n
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// payloadCounter counts the wake-up channel's notifications on a LISTEN
// connection of its own, by kind: naming one listener ("<due>|<id>",
// migration 0010) or everyone ("<due>").
type payloadCounter struct {
	b    *fleetBench
	conn *pgx.Conn
	done chan struct{}
	// Set by the reading goroutine, read after done is closed.
	named, everyone int
	names           map[string]bool
	err             error
}

// fanoutSentinel ends a count: a payload naming a listener that is none
// of the fleet's, so every process ignores it.
const fanoutSentinel = "2000-01-01 00:00:00+00|fleet-count-sentinel"

func (b *fleetBench) countPayloads(t *testing.T) *payloadCounter {
	t.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, b.url)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Exec(ctx, "LISTEN "+relay.NotifyChannel); err != nil {
		_ = conn.Close(ctx)
		t.Fatal(err)
	}
	c := &payloadCounter{b: b, conn: conn, done: make(chan struct{}), names: map[string]bool{}}
	go func() {
		defer close(c.done)
		for {
			n, err := conn.WaitForNotification(ctx)
			if err != nil {
				c.err = err
				return
			}
			if n.Payload == fanoutSentinel {
				return
			}
			if _, id, ok := strings.Cut(n.Payload, "|"); ok {
				c.named++
				c.names[id] = true
			} else {
				c.everyone++
			}
		}
	}()
	return c
}

// stop sends the sentinel (notifications arrive in commit order: every
// one committed before it has been counted when it arrives) and returns
// the counts and how many listeners were named.
func (c *payloadCounter) stop(t *testing.T) (named, everyone, distinct int) {
	t.Helper()
	if _, err := c.b.pool.Exec(context.Background(), `SELECT pg_notify($1, $2)`, relay.NotifyChannel, fanoutSentinel); err != nil {
		t.Fatal(err)
	}
	select {
	case <-c.done:
	case <-time.After(time.Minute):
		t.Fatal("the payload counter did not see its sentinel within a minute")
	}
	_ = c.conn.Close(context.Background())
	if c.err != nil {
		t.Fatalf("payload counter: %v", c.err)
	}
	return c.named, c.everyone, len(c.names)
}

// fallbackAnchor is a line of a wake-up function, and whether a record
// goes before it or after it.
type fallbackAnchor struct {
	line   string
	before bool
}

// fallbackAnchors are the lines of the wake-up functions where a commit
// that found every registration held goes on: migration 0010's branch
// that notifies everyone (the record goes after the line), 0013's naming
// of the held registrations (the record goes before it).
var fallbackAnchors = []fallbackAnchor{
	{`ELSIF EXISTS (SELECT 1 FROM "document_compilation_outbox_idle_listeners") THEN`, false},
	{`held := ARRAY(`, true},
}

// diagnoseFallbacks replaces the wake-up function in place with a copy
// that, where it falls back to notifying everyone, records which
// statement each registration's holder was running (xmax -> its
// transaction lock -> pg_stat_activity), and returns the reading of those
// records, which puts the function back. A function with no such branch
// (0007's) is left alone.
func (b *fleetBench) diagnoseFallbacks(t *testing.T) func(*testing.T) []string {
	t.Helper()
	ctx := context.Background()
	var def string
	if err := b.pool.QueryRow(ctx, `SELECT pg_get_functiondef(tgfoid) FROM pg_trigger
		WHERE tgrelid = 'document_compilation_outbox'::regclass AND tgname LIKE 'document_compilation_outbox_wake%on_insert'`).Scan(&def); err != nil {
		t.Fatal(err)
	}
	i := slices.IndexFunc(fallbackAnchors, func(a fallbackAnchor) bool { return strings.Contains(def, a.line) })
	if i < 0 {
		return func(*testing.T) []string { return nil }
	}
	anchor := fallbackAnchors[i]
	record := `
    INSERT INTO public.fleet_wake_fallbacks (registrations, holders)
    SELECT count(*)::integer, array_agg(coalesce(substring(a.query from '-- name: (\w+)'), left(a.query, 40), 'no holder'))
      FROM "document_compilation_outbox_idle_listeners" l
      LEFT JOIN pg_locks k ON k.locktype = 'transactionid' AND k.transactionid = l.xmax AND k.mode = 'ExclusiveLock' AND k.granted
      LEFT JOIN pg_stat_activity a ON a.pid = k.pid
    HAVING count(*) > 0;
`
	if anchor.before {
		record += anchor.line
	} else {
		record = anchor.line + record
	}
	for _, q := range []string{
		`CREATE TABLE IF NOT EXISTS public.fleet_wake_fallbacks (at timestamptz NOT NULL DEFAULT clock_timestamp(), registrations integer NOT NULL, holders text[])`,
		`TRUNCATE public.fleet_wake_fallbacks`,
		strings.Replace(def, anchor.line, record, 1),
	} {
		if _, err := b.pool.Exec(ctx, q); err != nil {
			t.Fatalf("diagnosing wake-up function: %v", err)
		}
	}
	return func(t *testing.T) []string {
		t.Helper()
		rows, err := b.pool.Query(ctx, `SELECT registrations, coalesce(holders, '{}') FROM public.fleet_wake_fallbacks ORDER BY at`)
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for rows.Next() {
			var n int
			var holders []string
			if err := rows.Scan(&n, &holders); err != nil {
				t.Fatal(err)
			}
			sort.Strings(holders)
			out = append(out, fmt.Sprintf("%d:%s", n, strings.Join(holders, "+")))
		}
		if err := rows.Err(); err != nil {
			t.Fatal(err)
		}
		if _, err := b.pool.Exec(ctx, def); err != nil {
			t.Fatalf("restoring the wake-up function: %v", err)
		}
		return out
	}
}

// holderSummary folds the fallbacks' records ("<registrations>:<holder
// statements>") into counts of each, for one field of a line.
func holderSummary(held []string) string {
	if len(held) == 0 {
		return "-"
	}
	counts := map[string]int{}
	for _, h := range held {
		counts[h]++
	}
	keys := make([]string, 0, len(counts))
	for k := range counts {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool {
		return counts[keys[i]] > counts[keys[j]] || counts[keys[i]] == counts[keys[j]] && keys[i] < keys[j]
	})
	var parts []string
	for _, k := range keys {
		parts = append(parts, fmt.Sprintf("%dx[%s]", counts[k], strings.ReplaceAll(k, " ", "_")))
	}
	return strings.Join(parts, ",")
}

// metricsLine is what `kfsdb-bench work --metrics-listen` prints.
var metricsLine = regexp.MustCompile(`serving metrics on (http://\S+/metrics)`)

// scrapeFleet sums the processes' source counters (observe) from their
// metrics endpoints, scraped all at once: each scrape also reads the
// backlog gauges from the database (slow on a loaded server), and
// scraped one after another the processes' windows would outlast the
// statements' by all those scrapes (idle polls counted that were not in
// the statements' window).
func scrapeFleet(t *testing.T, procs []*workerProc) map[observe.Counter]float64 {
	t.Helper()
	client := &http.Client{Timeout: 30 * time.Second}
	counts := make([]map[observe.Counter]float64, len(procs))
	errs := make([]error, len(procs))
	var wg sync.WaitGroup
	for i, p := range procs {
		wg.Go(func() { counts[i], errs[i] = scrapeProc(client, p) })
	}
	wg.Wait()
	sums := map[observe.Counter]float64{}
	for i := range procs {
		if errs[i] != nil {
			t.Fatal(errs[i])
		}
		for k, v := range counts[i] {
			sums[k] += v
		}
	}
	return sums
}

// scrapeProc reads one process's kfsdb counters.
func scrapeProc(client *http.Client, p *workerProc) (map[observe.Counter]float64, error) {
	m := metricsLine.FindStringSubmatch(p.out.String())
	if m == nil {
		return nil, fmt.Errorf("a fleet process printed no metrics address:\n%s", p.out.String())
	}
	resp, err := client.Get(m[1])
	if err != nil {
		return nil, fmt.Errorf("scrape %s: %w", m[1], err)
	}
	body, err := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	if err != nil || resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("scrape %s: %v (status %d)", m[1], err, resp.StatusCode)
	}
	out := map[observe.Counter]float64{}
	sc := bufio.NewScanner(strings.NewReader(string(body)))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) != 2 || !strings.HasPrefix(f[0], "kfsdb_") || !strings.HasSuffix(f[0], "_total") {
			continue
		}
		if v, err := strconv.ParseFloat(f[1], 64); err == nil {
			out[observe.Counter(strings.TrimSuffix(strings.TrimPrefix(f[0], "kfsdb_"), "_total"))] += v
		}
	}
	return out, nil
}
