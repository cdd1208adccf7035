package cli

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"regexp"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/knowledgefs/kfsdb/repo"
	"github.com/knowledgefs/kfsdb/tests/pgtest"
	"github.com/knowledgefs/kfsdb/tests/promtest"
	"github.com/knowledgefs/kfsdb/tests/testfactory"
)

// TestOptsValidateMetricsListen: the console refuses a --metrics-listen
// that is not host:port (kfsdb-bench's work and relay: their own test).
func TestOptsValidateMetricsListen(t *testing.T) {
	t.Parallel()
	validate := func(addr string) error {
		return (&ConsoleOpts{DatabaseURL: "postgres://u@h/db", Out: &bytes.Buffer{}, MetricsListen: addr}).Validate()
	}
	requireValidateErr(t, validate("9090"), "MetricsListen must be host:port")
	require.NoError(t, validate("127.0.0.1:9090"))
	require.NoError(t, validate(""))
}

// TestConsoleServesMetrics runs `kfsdb console --metrics-listen`: the
// console's own statements are timed by query name and the backlog
// gauges match the database.
func TestConsoleServesMetrics(t *testing.T) {
	t.Parallel()
	db := pgtest.NewDB(t)
	docs := testfactory.SeedDocuments(t.Context(), t, db.Pool, 1, 3)
	attempts := testfactory.StartAll(t.Context(), t, repo.New(nil), db.Pool, docs, 0)

	url, written, _ := promtest.Serve(t, func(ctx context.Context, out io.Writer) error {
		return Console(ctx, &ConsoleOpts{DatabaseURL: db.URL, Out: out, Listen: "127.0.0.1:0", MetricsListen: "127.0.0.1:0"})
	})
	var page string
	require.Eventually(t, func() bool {
		m := regexp.MustCompile(`kfsdb console on (http://\S+/)`).FindStringSubmatch(written())
		if m != nil {
			page = m[1]
		}
		return m != nil
	}, 10*time.Second, 10*time.Millisecond, written())
	resp, err := http.Get(page)
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)

	mfs := promtest.Scrape(t, url)
	require.Positive(t, promtest.StatementCount(mfs, "AttemptCountByRunStateAllTenants"), "the overview's counts were not timed")
	var pending float64
	for _, m := range mfs["kfsdb_outbox_due"].GetMetric() {
		if m.Label[0].GetValue() == "pending" {
			pending = m.GetGauge().GetValue()
		}
	}
	require.EqualValues(t, len(attempts), pending)
	// The console runs no relay or worker: no runtime counters.
	require.NotContains(t, mfs, "kfsdb_worker_completed_total")
}
