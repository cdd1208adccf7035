package benchcli

import (
	"bytes"
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/knowledgefs/kfsdb/bench/kfsdb-bench/delivery"
	"github.com/knowledgefs/kfsdb/observe"
	"github.com/knowledgefs/kfsdb/repo"
	"github.com/knowledgefs/kfsdb/tests/natstest"
	"github.com/knowledgefs/kfsdb/tests/pgtest"
	"github.com/knowledgefs/kfsdb/tests/testfactory"
)

func TestWorkOptsValidate(t *testing.T) {
	t.Parallel()
	var out bytes.Buffer
	valid := WorkOpts{DatabaseURL: "postgres://u@h/db", Out: &out, Duration: time.Second}
	for name, tc := range map[string]struct {
		edit    func(o *WorkOpts)
		wantErr string
	}{
		"Valid":            {func(*WorkOpts) {}, ""},
		"MissingURL":       {func(o *WorkOpts) { o.DatabaseURL = "" }, "DatabaseURL is required"},
		"MissingOut":       {func(o *WorkOpts) { o.Out = nil }, "Out is required"},
		"ZeroDuration":     {func(o *WorkOpts) { o.Duration = 0 }, "Duration must be > 0"},
		"TooManyWorkers":   {func(o *WorkOpts) { o.Workers = 65 }, "Workers must be 1..64"},
		"NegativeConc":     {func(o *WorkOpts) { o.Concurrency = -1 }, "Concurrency must be 1..64"},
		"FailRateAboveOne": {func(o *WorkOpts) { o.FailRate = 1.5 }, "FailRate must be 0..1"},
		"NegativeLease":    {func(o *WorkOpts) { o.LeaseDuration = -time.Second }, "must not be negative"},
		"RelayDelivery":    {func(o *WorkOpts) { o.Delivery = delivery.Relay }, ""},
		"UnknownDelivery":  {func(o *WorkOpts) { o.Delivery = "kafka" }, `unknown delivery "kafka"`},
		"NATSWithoutURL":   {func(o *WorkOpts) { o.Delivery = delivery.NATS }, "--delivery nats needs --nats-url"},
		"NATSURLWithoutIt": {func(o *WorkOpts) { o.NATSURL = "nats://127.0.0.1:4222" }, "--nats-url is for --delivery nats, not postgres"},
		"NATSDelivery":     {func(o *WorkOpts) { o.Delivery, o.NATSURL = delivery.NATS, "nats://a:4222,nats://b:4222" }, ""},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			o := valid
			tc.edit(&o)
			requireValidateErr(t, o.Validate(), tc.wantErr)
		})
	}
}

func TestWorkUsageErrorsExitTwo(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{{"work"}, {"work", "extra"}, {"work", "--database-url", "postgres://u@h/db", "--duration", "0s"},
		{"work", "--database-url", "postgres://u@h/db", "--fail-rate", "2"},
		{"work", "--database-url", "postgres://u@h/db", "--delivery", "nats"}, {"work", "--database-url", "postgres://u@h/db", "--delivery", ""}} {
		var stdout, stderr bytes.Buffer
		require.Equal(t, 2, Main(t.Context(), args, &stdout, &stderr, noEnv), "args %q: %s", args, stderr.String())
	}
}

// startNATS starts an in-process JetStream server for the test and
// returns its URL.
func startNATS(t *testing.T) string {
	t.Helper()
	n, err := natstest.StartNode(t.TempDir())
	require.NoError(t, err)
	t.Cleanup(n.Shutdown)
	return n.URL
}

// TestNATSURLUsageErrorsExitTwo: a missing, superfluous or malformed
// --nats-url is a usage error (exit 2) that says what is wrong, before
// any connection is tried.
func TestNATSURLUsageErrorsExitTwo(t *testing.T) {
	t.Parallel()
	db := []string{"--database-url", "postgres://u@h/db"}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"work", "--delivery", "nats"}, "--delivery nats needs --nats-url, e.g. nats://127.0.0.1:4222"},
		{[]string{"work", "--nats-url", "nats://127.0.0.1:4222"}, "--nats-url is for --delivery nats, not postgres"},
		{[]string{"work", "--delivery", "relay", "--nats-url", "nats://127.0.0.1:4222"}, "--nats-url is for --delivery nats, not relay"},
		{[]string{"work", "--delivery", "nats", "--nats-url", "http://127.0.0.1:4222"}, `bad --nats-url "http://127.0.0.1:4222": want a nats://, tls://, ws:// or wss:// URL`},
		{[]string{"work", "--delivery", "nats", "--nats-url", "nats://127.0.0.1"}, `bad --nats-url "nats://127.0.0.1": want host:port`},
		{[]string{"work", "--delivery", "nats", "--nats-url", "nats://a:4222,:4222"}, `bad --nats-url ":4222"`},
		{[]string{"relay", "--nats-url", "127.0.0.1:4222"}, `bad --nats-url "127.0.0.1:4222"`},
		{[]string{"bench", "--delivery", "nats"}, "--delivery nats needs --nats-url"},
		{[]string{"bench", "--delivery", "nats", "--nats-url", "nats://%zz:1"}, `bad --nats-url "nats://%zz:1"`},
	} {
		var stdout, stderr bytes.Buffer
		args := append(append([]string{tc.args[0]}, db...), tc.args[1:]...)
		require.Equal(t, 2, Main(t.Context(), args, &stdout, &stderr, noEnv), "args %q: %s", args, stderr.String())
		require.Contains(t, stderr.String(), tc.want, "args %q", args)
	}
}

// TestWorkCompletesAttempts runs `kfsdb-bench work` with each delivery on
// a database with started attempts: each is compiled (its space's
// candidate bound) and succeeds once. Work runs until its context ends;
// the test ends it once every attempt has succeeded, so a slow machine
// makes the test slower, not wrong.
func TestWorkCompletesAttempts(t *testing.T) {
	t.Parallel()
	for _, mode := range []delivery.Mode{"", delivery.Postgres, delivery.Relay, delivery.NATS} {
		t.Run(mode.String()+"/"+string(mode), func(t *testing.T) {
			t.Parallel()
			ctx := t.Context()
			db := pgtest.NewDB(t)
			docs := testfactory.SeedDocuments(ctx, t, db.Pool, 2, 10)
			attempts := testfactory.StartAll(ctx, t, repo.New(nil), db.Pool, docs, 0)
			var natsURL string
			if mode == delivery.NATS {
				natsURL = startNATS(t)
			}

			wctx, stop := context.WithCancel(ctx)
			defer stop()
			out := &testfactory.SyncBuffer{}
			type result struct {
				res *WorkResult
				err error
			}
			done := make(chan result, 1)
			go func() {
				res, err := Work(wctx, &WorkOpts{DatabaseURL: db.URL, Delivery: mode, NATSURL: natsURL, Out: out, Duration: time.Hour, Workers: 2,
					StepDelay: time.Millisecond, ID: "work-test"})
				done <- result{res, err}
			}()
			require.Eventually(t, func() bool {
				var n int
				require.NoError(t, db.Pool.QueryRow(ctx, `SELECT count(*) FROM document_compilation_attempts WHERE run_state = 'succeeded'`).Scan(&n))
				return n == len(attempts)
			}, 2*time.Minute, 10*time.Millisecond, "not every attempt succeeded")
			stop()
			r := <-done
			require.NoError(t, r.err, out.String())
			res := r.res
			require.Contains(t, out.String(), "work work-test: "+mode.String()+" delivery, 2 workers x 2")
			require.Contains(t, out.String(), "worker_completed")
			counts := map[observe.Counter]int64{}
			for _, c := range res.Counts {
				counts[c.Counter] = c.N
			}
			require.EqualValues(t, len(attempts), counts[observe.Completed], out.String())
			require.EqualValues(t, len(attempts), counts[observe.LeasesAcquired], out.String())
			if mode == delivery.Relay || mode == delivery.NATS {
				require.EqualValues(t, len(attempts), counts[observe.Published], out.String())
				require.Zero(t, counts[observe.FetchedLeases], out.String())
			} else {
				require.EqualValues(t, len(attempts), counts[observe.FetchedLeases], out.String())
				require.Zero(t, counts[observe.Published], out.String())
				require.NotContains(t, out.String(), "queue_published")
			}
			for _, a := range attempts {
				r := testfactory.RequireInvariants(ctx, t, db.Pool, a.ID)
				require.Equal(t, "succeeded", string(r.Attempt.RunState))
				require.EqualValues(t, 1, r.Attempt.ExecutionAttempts)
				require.Equal(t, testfactory.Candidates(docs)[r.Attempt.KnowledgeSpaceID].ID, *r.Attempt.CandidatePublicationID)
			}
		})
	}
}
