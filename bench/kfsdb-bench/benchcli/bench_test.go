package benchcli

import (
	"bytes"
	"math"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/knowledgefs/kfsdb/bench/kfsdb-bench/delivery"
	"github.com/knowledgefs/kfsdb/tests/pgtest"
)

func TestBenchOptsValidate(t *testing.T) {
	t.Parallel()
	var out bytes.Buffer
	valid := BenchOpts{DatabaseURL: "postgres://u@h/db", Out: &out, Duration: time.Second, Rate: 200}
	for name, tc := range map[string]struct {
		edit    func(o *BenchOpts)
		wantErr string
	}{
		"Valid":            {func(*BenchOpts) {}, ""},
		"Unpaced":          {func(o *BenchOpts) { o.Rate = 0 }, ""},
		"MissingURL":       {func(o *BenchOpts) { o.DatabaseURL = "" }, "`make bench-kfsdb`"},
		"BadURL":           {func(o *BenchOpts) { o.DatabaseURL = "postgres://u@h:notaport/db" }, "not a valid PostgreSQL URL"},
		"MissingOut":       {func(o *BenchOpts) { o.Out = nil }, "Out is required"},
		"NegativeDuration": {func(o *BenchOpts) { o.Duration = -time.Second }, "Duration must not be negative"},
		"TooManyProducers": {func(o *BenchOpts) { o.Producers = 257 }, "Producers must be 1..256"},
		"NegativeWorkers":  {func(o *BenchOpts) { o.Workers = -1 }, "Workers must be 1..256"},
		"NegativeRate":     {func(o *BenchOpts) { o.Rate = -1 }, "Rate must be 0..1000000"},
		"NaNRate":          {func(o *BenchOpts) { o.Rate = math.NaN() }, "Rate must be 0..1000000"},
		"InfiniteRate":     {func(o *BenchOpts) { o.Rate = math.Inf(1) }, "Rate must be 0..1000000"},
		"RelayDelivery":    {func(o *BenchOpts) { o.Delivery = delivery.Relay }, ""},
		"UnknownDelivery":  {func(o *BenchOpts) { o.Delivery = "kafka" }, `unknown delivery "kafka"`},
		"NATSWithoutURL":   {func(o *BenchOpts) { o.Delivery = delivery.NATS }, "--delivery nats needs --nats-url"},
		"NATSDelivery":     {func(o *BenchOpts) { o.Delivery, o.NATSURL = delivery.NATS, "nats://127.0.0.1:4222" }, ""},
		"UnknownScenario":  {func(o *BenchOpts) { o.Scenario = "flood" }, `unknown scenario "flood"`},
		"NoisyTenant":      {func(o *BenchOpts) { o.Scenario, o.Duration, o.Rate = ScenarioNoisyTenant, 0, 0 }, ""},
		"NoisyWithRate":    {func(o *BenchOpts) { o.Scenario, o.Duration = ScenarioNoisyTenant, 0 }, "apply to the lifecycle scenario only"},
		"PollInterval":     {func(o *BenchOpts) { o.PollInterval = time.Millisecond }, ""},
		"NegativePoll":     {func(o *BenchOpts) { o.PollInterval = -time.Millisecond }, "PollInterval: poll interval must not be negative"},
		"PollWithRelay":    {func(o *BenchOpts) { o.Delivery, o.PollInterval = delivery.Relay, time.Millisecond }, "PollInterval: a poll interval applies to the postgres delivery only"},
		"NoisyWithPoll": {func(o *BenchOpts) {
			o.Scenario, o.Duration, o.Rate, o.PollInterval = ScenarioNoisyTenant, 0, 0, time.Millisecond
		}, "apply to the lifecycle scenario only"},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			o := valid
			tc.edit(&o)
			requireValidateErr(t, o.Validate(), tc.wantErr)
		})
	}
}

func TestBenchUsageErrorsExitTwo(t *testing.T) {
	t.Parallel()
	url := []string{"--database-url", "postgres://u@h/db"}
	for _, args := range [][]string{{"bench", "extra"}, {"bench", "--rate", "-5"}, {"bench", "--rate", "x"},
		append([]string{"bench", "--delivery", "nats"}, url...), append([]string{"bench", "--scenario", "flood"}, url...),
		append([]string{"bench", "--scenario", "noisy-tenant", "--duration", "5s"}, url...)} {
		var stdout, stderr bytes.Buffer
		require.Equal(t, 2, Main(t.Context(), args, &stdout, &stderr, noEnv), "args %q: %s", args, stderr.String())
	}
}

// TestBenchWithoutDatabaseURLNamesMakeTarget: kfsdb-bench starts no
// server of its own; without a URL it says where a one-command run is.
func TestBenchWithoutDatabaseURLNamesMakeTarget(t *testing.T) {
	t.Parallel()
	var stdout, stderr bytes.Buffer
	require.Equal(t, 2, Main(t.Context(), []string{"bench", "--duration", "1s"}, &stdout, &stderr, noEnv))
	require.Contains(t, stderr.String(), "--database-url or set $DATABASE_URL")
	require.Contains(t, stderr.String(), "`make bench-kfsdb`")
	require.Empty(t, stdout.String(), "nothing ran")
}

// TestBenchOnFreshDatabase runs `kfsdb-bench bench --database-url URL` with the
// URL of an empty database: it creates, migrates and drops a scratch
// database beside it and prints the report lines scripts parse.
func TestBenchOnFreshDatabase(t *testing.T) {
	t.Parallel()
	for _, mode := range []delivery.Mode{"", delivery.Relay, delivery.NATS} {
		t.Run(mode.String()+"/"+string(mode), func(t *testing.T) {
			t.Parallel()
			db := pgtest.NewEmptyDB(t)
			var stdout, stderr bytes.Buffer
			args := []string{"bench", "--database-url", db.URL, "--duration", "1s", "--producers", "2", "--workers", "2", "--rate", "50"}
			if mode != "" {
				args = append(args, "--delivery", string(mode))
			}
			if mode == delivery.NATS {
				args = append(args, "--nats-url", startNATS(t))
			}
			code := Main(t.Context(), args, &stdout, &stderr, noEnv)
			s := stdout.String()
			require.Equal(t, 0, code, "stderr: %s\nstdout: %s", stderr.String(), s)
			require.Contains(t, s, "server: existing server ")
			require.Contains(t, s, "== created database kfsdb_bench_")
			require.Contains(t, s, "00007_outbox_wakeups.sql")
			require.Contains(t, s, "| producers / worker slots / knowledge spaces / duration | 2 / 2 / 1 / 1s |")
			require.Contains(t, s, "| offered rate | 50 attempts/s |")
			require.Contains(t, s, "| delivery | "+mode.String()+": ")
			require.Regexp(t, `(?m)^\| attempts started / succeeded \(drained: true\) \| (\d+) / (\d+) \|$`, s)
			require.Regexp(t, `(?m)^\| lifecycle throughput \(succeeded within the window\) \| \d+ attempts/s \|$`, s)
			require.Regexp(t, `(?m)^\| start → succeeded p50 / p99 \| \S+ / \S+ \|$`, s)
			require.Regexp(t, `(?m)^\| Start \| \d+ \| `, s)
			if mode == delivery.Relay || mode == delivery.NATS {
				require.Regexp(t, `(?m)^\| ClaimOutbox \| \d+ \| `, s)
				require.NotContains(t, s, "| FetchLeases |")
			} else {
				require.Regexp(t, `(?m)^\| FetchLeases \| \d+ \| `, s)
				require.NotContains(t, s, "| ClaimOutbox |")
			}
			require.NotContains(t, s, "PostgreSQL CPU per attempt", "no KFS_BENCH_CPU_FILE, no CPU line")
			require.Contains(t, s, "== dropped database kfsdb_bench_")
			require.NotContains(t, s, "kfsdb-test-password")
		})
	}
}

// TestBenchPollingSource: --poll-interval reaches the postgres source,
// which then polls with no LISTEN and no idle registration (the wake-up
// path the floor's fetcher has), and the run still drains.
func TestBenchPollingSource(t *testing.T) {
	t.Parallel()
	db := pgtest.NewEmptyDB(t)
	var stdout, stderr bytes.Buffer
	code := Main(t.Context(), []string{"bench", "--database-url", db.URL, "--duration", "1s", "--producers", "2", "--workers", "2",
		"--rate", "50", "--poll-interval", "1ms"}, &stdout, &stderr, noEnv)
	s := stdout.String()
	require.Equal(t, 0, code, "stderr: %s\nstdout: %s", stderr.String(), s)
	require.Contains(t, s, "| source wake-up | polls every 1ms, no LISTEN/NOTIFY |")
	require.Regexp(t, `(?m)^\| attempts started / succeeded \(drained: true\) \| (\d+) / (\d+) \|$`, s)
	require.Regexp(t, `(?m)^\| FetchLeases \| \d+ \| `, s)
	require.NotContains(t, s, "| LISTEN kfsdb_outbox |", "a polling source does not listen")
	require.NotContains(t, s, "| OutboxListenerIdle |", "a polling source does not register idle")
}

// TestBenchObserved runs `kfsdb-bench bench --observe` on both PostgreSQL-side
// deliveries: every attempt started (warm-up included) left a request
// span, a Start span and a process span, and on the relay path a
// publish span, all exported through the SDK.
func TestBenchObserved(t *testing.T) {
	t.Parallel()
	for _, mode := range []delivery.Mode{delivery.Postgres, delivery.Relay} {
		t.Run(string(mode), func(t *testing.T) {
			t.Parallel()
			db := pgtest.NewEmptyDB(t)
			var stdout, stderr bytes.Buffer
			code := Main(t.Context(), []string{"bench", "--database-url", db.URL, "--delivery", string(mode), "--observe",
				"--duration", "1s", "--producers", "2", "--workers", "2", "--rate", "40"}, &stdout, &stderr, noEnv)
			s := stdout.String()
			require.Equal(t, 0, code, "stderr: %s\nstdout: %s", stderr.String(), s)
			m := regexp.MustCompile(`(?m)^\| observed: spans request / Start / publish / process \| (\d+) / (\d+) / (\d+) / (\d+) \|$`).FindStringSubmatch(s)
			require.NotNil(t, m, s)
			request, start, publish, process := atoi(t, m[1]), atoi(t, m[2]), atoi(t, m[3]), atoi(t, m[4])
			require.Positive(t, request)
			require.Equal(t, request, start, "one Start span per request")
			require.GreaterOrEqual(t, process, request, "a process span for every attempt")
			if mode == delivery.Relay {
				require.GreaterOrEqual(t, publish, request, "a publish span for every attempt")
			} else {
				require.Zero(t, publish, "direct delivery publishes nothing")
			}
		})
	}
}

func atoi(t *testing.T, s string) int {
	t.Helper()
	n, err := strconv.Atoi(s)
	require.NoError(t, err)
	return n
}

// TestBenchNoisyTenant runs the fairness scenario on each delivery: its
// last line is the summary, and with direct delivery the quiet tenants are
// done while most of the flood still waits.
func TestBenchNoisyTenant(t *testing.T) {
	t.Parallel()
	for _, mode := range []delivery.Mode{delivery.Postgres, delivery.Relay} {
		t.Run(string(mode), func(t *testing.T) {
			t.Parallel()
			db := pgtest.NewEmptyDB(t)
			var stdout, stderr bytes.Buffer
			code := Main(t.Context(), []string{"bench", "--database-url", db.URL, "--delivery", string(mode), "--scenario", "noisy-tenant"},
				&stdout, &stderr, noEnv)
			s := stdout.String()
			require.Equal(t, 0, code, "stderr: %s\nstdout: %s", stderr.String(), s)
			lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
			last := lines[len(lines)-1]
			require.Regexp(t, `^noisy-tenant: quiet tenants' p99 wait \S+ \(alone \S+\) = \d+\.\dx$`, last, s)
			m := regexp.MustCompile(`(?m)^\| flood attempts still waiting when the last quiet one succeeded \| (\d+) of 5000 \|$`).FindStringSubmatch(s)
			require.NotNil(t, m, s)
			waiting, err := strconv.Atoi(m[1])
			require.NoError(t, err)
			if mode == delivery.Postgres {
				require.Greater(t, waiting, 2500, "the quiet tenants waited for the flood:\n%s", s)
			}
			t.Logf("%s: flood still waiting %d\n%s", mode, waiting, s)
		})
	}
}
