package cli

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	neturl "net/url"
	"regexp"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/stretchr/testify/require"

	"github.com/knowledgefs/kfsdb/kfstype"
	"github.com/knowledgefs/kfsdb/repo"
	"github.com/knowledgefs/kfsdb/tests/pgtest"
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
			return (&ConsoleOpts{DatabaseURL: url, Out: &bytes.Buffer{}, MetricsListen: addr}).Validate()
		},
	} {
		requireValidateErr(t, validate("9090"), "MetricsListen must be host:port")
		// No metrics token in the environment: loopback only.
		requireValidateErr(t, validate("0.0.0.0:9090"), "not a loopback address, so a token is required")
		require.NoError(t, validate("127.0.0.1:9090"), name)
		require.NoError(t, validate(""), name)
	}
}

// runServing runs serve (a command given out) in a goroutine until the
// returned stop is called, and waits for its "serving metrics on" line:
// it returns the /metrics URL and a reader of what the command wrote.
func runServing(t *testing.T, serve func(ctx context.Context, out io.Writer) error) (url string, written func() string, stop func()) {
	t.Helper()
	// The commands wrap Out in their own syncWriter: reading buf under
	// out.mu reads what they have written so far.
	var buf bytes.Buffer
	out := &syncWriter{w: &buf}
	written = func() string {
		out.mu.Lock()
		defer out.mu.Unlock()
		return buf.String()
	}
	done := make(chan error, 1)
	ctx, cancel := context.WithCancel(context.Background())
	go func() { done <- serve(ctx, out) }()
	stopped := false
	stop = func() {
		if stopped {
			return
		}
		stopped = true
		cancel()
		select {
		case err := <-done:
			require.NoError(t, err)
		case <-time.After(30 * time.Second):
			t.Fatal("the command did not stop")
		}
		_, err := http.Get(url) //nolint:bodyclose // fails: the server is shut down
		require.Error(t, err, "the metrics server still answers after the command returned")
	}
	t.Cleanup(stop)
	addr := regexp.MustCompile(`serving metrics on (http://\S+/metrics)`)
	require.Eventually(t, func() bool {
		m := addr.FindStringSubmatch(written())
		if m != nil {
			url = m[1]
		}
		return m != nil
	}, 10*time.Second, 10*time.Millisecond, written())
	return url, written, stop
}

// startedDB is a test database with spaces×perSpace attempts started.
func startedDB(t *testing.T, spaces, perSpace int) (*pgtest.DB, []*kfstype.Attempt) {
	t.Helper()
	db := pgtest.NewDB(t)
	docs := testfactory.SeedDocuments(t.Context(), t, db.Pool, spaces, perSpace)
	return db, testfactory.StartAll(t.Context(), t, repo.New(nil), db.Pool, docs, 0)
}

// scrapeMetrics reads url as Prometheus would.
func scrapeMetrics(t *testing.T, url string) map[string]*dto.MetricFamily {
	t.Helper()
	return scrapeMetricsWith(t, url, "")
}

// scrapeMetricsWith reads url as Prometheus would, with token as its
// bearer token when not "".
func scrapeMetricsWith(t *testing.T, url, token string) map[string]*dto.MetricFamily {
	t.Helper()
	resp := getWith(t, url, token)
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	p := expfmt.NewTextParser(model.LegacyValidation)
	mfs, err := p.TextToMetricFamilies(resp.Body)
	require.NoError(t, err)
	return mfs
}

// statementCount is how many statements named query the histogram saw.
func statementCount(mfs map[string]*dto.MetricFamily, query string) uint64 {
	var n uint64
	for _, m := range mfs["kfsdb_statement_duration_seconds"].GetMetric() {
		if m.Label[0].GetValue() == query {
			n += m.GetHistogram().GetSampleCount()
		}
	}
	return n
}

// TestConsoleServesMetrics runs `kfsdb console --metrics-listen` with a
// token: /metrics wants it too; the console's own statements are timed by
// query name and the backlog gauges match the database.
func TestConsoleServesMetrics(t *testing.T) {
	t.Parallel()
	db, attempts := startedDB(t, 1, 3)

	url, written, _ := runServing(t, func(ctx context.Context, out io.Writer) error {
		return Console(ctx, &ConsoleOpts{DatabaseURL: db.URL, Out: out, Listen: "127.0.0.1:0", MetricsListen: "127.0.0.1:0", AuthToken: strongToken})
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
	require.Equal(t, http.StatusUnauthorized, getStatus(t, url, "wrong-token-0123456789-abcdefghij"))

	mfs := scrapeMetricsWith(t, url, strongToken)
	require.Positive(t, statementCount(mfs, "AttemptCountByRunStateAllTenants"), "the overview's counts were not timed")
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
// only: a request through a proxy on this host is refused.
func TestConfinedConsoleMetrics(t *testing.T) {
	t.Parallel()
	db := pgtest.NewDB(t)
	attempts := testfactory.Workload(t.Context(), t, &testfactory.Driver{Repo: repo.New(nil), DB: db.Pool}, []string{"metrics-a", "metrics-b"}, 6, nil)

	url, _, _ := runServing(t, func(ctx context.Context, out io.Writer) error {
		return Console(ctx, &ConsoleOpts{DatabaseURL: db.URL, Out: out, Listen: "127.0.0.1:0", MetricsListen: "127.0.0.1:0", TenantID: "metrics-a"})
	})
	mfs := scrapeMetrics(t, url)
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
