package cli_test

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	neturl "net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/knowledgefs/kfsdb/cmd/kfsdb/cli"
	"github.com/knowledgefs/kfsdb/kfstype"
	"github.com/knowledgefs/kfsdb/repo"
	"github.com/knowledgefs/kfsdb/tests/pgtest"
	"github.com/knowledgefs/kfsdb/tests/promtest"
	"github.com/knowledgefs/kfsdb/tests/testfactory"
)

// TestOptsValidateMetricsListen: the console refuses a --metrics-listen
// that is not host:port, or, without a metrics token, not loopback
// (kfsdb-bench's work and relay validate through the same function).
func TestOptsValidateMetricsListen(t *testing.T) {
	t.Parallel()
	const url = "postgres://u@h/db"
	for name, validate := range map[string]func(addr string) error{
		"console": func(addr string) error {
			return (&cli.ConsoleOpts{DatabaseURL: url, Out: &bytes.Buffer{}, MetricsListen: addr}).Validate()
		},
	} {
		requireValidateErr(t, validate("9090"), "MetricsListen must be host:port")
		// No metrics token in the environment: loopback only.
		requireValidateErr(t, validate("0.0.0.0:9090"), "not a loopback address, so a token is required")
		require.NoError(t, validate("127.0.0.1:9090"), name)
		require.NoError(t, validate(""), name)
	}
	// The console's token is not the metrics token: an exposed /metrics
	// needs its own.
	requireValidateErr(t, (&cli.ConsoleOpts{DatabaseURL: url, Out: &bytes.Buffer{}, MetricsListen: "0.0.0.0:9090", AuthToken: strongToken}).Validate(),
		"not a loopback address, so a token is required")
}

// startedDB is a test database with spaces×perSpace attempts started.
func startedDB(t *testing.T, spaces, perSpace int) (*pgtest.DB, []*kfstype.Attempt) {
	t.Helper()
	db := pgtest.NewDB(t)
	docs := testfactory.SeedDocuments(t.Context(), t, db.Pool, spaces, perSpace)
	return db, testfactory.StartAll(t.Context(), t, repo.New(nil), db.Pool, docs, 0)
}

// metricsToken is the metrics token of TestConsoleServesMetrics; it
// passes httpguard.CheckToken.
const metricsToken = "EkiDgeLIG0ZjRv6Ps5IWHxkpEGdImwHLOdvVuGuKFC8"

// TestConsoleServesMetrics runs `kfsdb console --metrics-listen` with a
// console token and a metrics token: /metrics takes only the metrics
// token, never the console's, and 60 wrong ones from one address end in
// 429 while the right one is still served (issue 39's N3); the console's
// own statements are timed by query name and the backlog gauges match
// the database. Not parallel: it sets the environment.
func TestConsoleServesMetrics(t *testing.T) {
	t.Setenv(cli.EnvMetricsToken, metricsToken)
	db, attempts := startedDB(t, 1, 3)

	url, written, _ := promtest.Serve(t, func(ctx context.Context, out io.Writer) error {
		return cli.Console(ctx, &cli.ConsoleOpts{DatabaseURL: db.URL, Out: out, Listen: "127.0.0.1:0", MetricsListen: "127.0.0.1:0", AuthToken: strongToken})
	})
	var page string
	require.Eventually(t, func() bool {
		m := regexp.MustCompile(`kfsdb console on (http://\S+/)`).FindStringSubmatch(written())
		if m != nil {
			page = m[1]
		}
		return m != nil
	}, 10*time.Second, 10*time.Millisecond, written())
	require.Equal(t, http.StatusOK, getStatus(t, page, strongToken))
	require.Equal(t, http.StatusUnauthorized, getStatus(t, url, ""), "/metrics without the token")
	require.Equal(t, http.StatusUnauthorized, getStatus(t, url, strongToken), "/metrics with the console's token")
	require.NotContains(t, written(), cli.MetricsProxyNote, "these metrics have a token")
	last := 0
	for range 60 {
		last = getStatus(t, url, "wrong-"+metricsToken)
	}
	require.Equal(t, http.StatusTooManyRequests, last, "60 wrong metrics tokens from one address")

	mfs := promtest.ScrapeWith(t, url, metricsToken)
	require.Positive(t, promtest.StatementCount(mfs, "CountAttemptsAllTenants"), "the overview's counts were not timed")
	var pending float64
	for _, m := range mfs["kfsdb_outbox_due"].GetMetric() {
		if m.Label[0].GetValue() == "pending" {
			pending = m.GetGauge().GetValue()
		}
	}
	require.EqualValues(t, len(attempts), pending)
	// The console runs no relay or worker: no runtime counters.
	require.NotContains(t, mfs, "kfsdb_worker_completed_total")
	require.Regexp(t, `msg="metrics: wrong bearer token" remote=127\.0\.0\.1`, written(), "wrong metrics tokens are logged")

	// The console's token as the metrics token is refused.
	t.Setenv(cli.EnvMetricsToken, strongToken)
	err := cli.Console(t.Context(), &cli.ConsoleOpts{DatabaseURL: db.URL, Out: io.Discard, Listen: "127.0.0.1:0", MetricsListen: "127.0.0.1:0", AuthToken: strongToken})
	require.ErrorContains(t, err, "the metrics token is the console's token")
}

// getWith GETs url, with token as bearer token when not "".
func getWith(t *testing.T, url, token string) *http.Response {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, url, nil)
	require.NoError(t, err)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	return resp
}

// getStatus is getWith's status.
func getStatus(t *testing.T, url, token string) int {
	t.Helper()
	resp := getWith(t, url, token)
	resp.Body.Close()
	return resp.StatusCode
}

// TestConfinedConsoleMetrics: a `--tenant` console's /metrics counts
// only its tenant's attempts and leaves out the outbox (every tenant's
// backlog), as its overview does. Without a token they answer loopback
// only: a request through a proxy on this host is refused, and the
// console says so at start.
func TestConfinedConsoleMetrics(t *testing.T) {
	t.Parallel()
	db := pgtest.NewDB(t)
	attempts := testfactory.Workload(t.Context(), t, &testfactory.Driver{Repo: repo.New(nil), DB: db.Pool}, []string{"metrics-a", "metrics-b"}, 6, nil)

	url, written, _ := promtest.Serve(t, func(ctx context.Context, out io.Writer) error {
		return cli.Console(ctx, &cli.ConsoleOpts{DatabaseURL: db.URL, Out: out, Listen: "127.0.0.1:0", MetricsListen: "127.0.0.1:0", TenantID: "metrics-a"})
	})
	// Issue 39's N10: a tokenless /metrics says at start that a proxy in
	// front must add a forwarding header.
	require.Eventually(t, func() bool { return strings.Contains(written(), cli.MetricsProxyNote) }, 10*time.Second, 10*time.Millisecond, written())
	mfs := promtest.Scrape(t, url)
	var n float64
	for _, m := range mfs["kfsdb_attempts"].GetMetric() {
		n += m.GetGauge().GetValue()
	}
	require.EqualValues(t, len(attempts["metrics-a"]), n, "only tenant metrics-a's attempts are counted")
	for _, name := range []string{"kfsdb_outbox_due", "kfsdb_outbox_due_capped", "kfsdb_outbox_oldest_due_age_seconds"} {
		require.NotContains(t, mfs, name, "the outbox is every tenant's")
	}

	target, err := neturl.Parse(url)
	require.NoError(t, err)
	proxy := httptest.NewServer(&httputil.ReverseProxy{Rewrite: func(r *httputil.ProxyRequest) {
		r.SetURL(&neturl.URL{Scheme: "http", Host: target.Host}) // Host: 127.0.0.1:PORT
		r.SetXForwarded()
	}})
	t.Cleanup(proxy.Close)
	require.Equal(t, http.StatusForbidden, getStatus(t, proxy.URL+"/metrics", ""), "a tokenless /metrics behind a proxy")
}
