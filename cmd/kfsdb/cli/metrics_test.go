package cli

import (
	"bytes"
	"context"
	"net/http"
	"regexp"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/stretchr/testify/require"

	"github.com/knowledgefs/kfsdb/repo"
	"github.com/knowledgefs/kfsdb/tests/pgtest"
	"github.com/knowledgefs/kfsdb/tests/testfactory"
)

func TestWorkOptsValidateMetricsListen(t *testing.T) {
	t.Parallel()
	o := WorkOpts{DatabaseURL: "postgres://u@h/db", Out: &bytes.Buffer{}, Duration: time.Second, MetricsListen: "9090"}
	requireValidateErr(t, o.Validate(), "MetricsListen must be host:port")
	o.MetricsListen = "127.0.0.1:9090"
	require.NoError(t, o.Validate())
}

// TestWorkServesMetrics runs `kfsdb work --metrics-listen` and scrapes
// /metrics while it runs: the completions, the statement histogram and
// the backlog gauges are there.
func TestWorkServesMetrics(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := pgtest.NewDB(t)
	docs := testfactory.SeedDocuments(ctx, t, db.Pool, 2, 5)
	attempts := testfactory.StartAll(ctx, t, repo.New(nil), db.Pool, docs, 0)

	// Work wraps Out in its own syncWriter: reading buf under out.mu
	// reads what Work has written so far.
	var buf bytes.Buffer
	out := &syncWriter{w: &buf}
	written := func() string {
		out.mu.Lock()
		defer out.mu.Unlock()
		return buf.String()
	}
	done := make(chan error, 1)
	wctx, stop := context.WithCancel(ctx)
	defer stop()
	go func() {
		_, err := Work(wctx, &WorkOpts{DatabaseURL: db.URL, Out: out, Duration: 20 * time.Second, Workers: 1,
			StepDelay: time.Millisecond, ID: "work-metrics", MetricsListen: "127.0.0.1:0"})
		done <- err
	}()
	addr := regexp.MustCompile(`serving metrics on (http://\S+/metrics)`)
	var url string
	require.Eventually(t, func() bool {
		m := addr.FindStringSubmatch(written())
		if m != nil {
			url = m[1]
		}
		return m != nil
	}, 10*time.Second, 10*time.Millisecond, written())

	scrape := func() map[string]*dto.MetricFamily {
		resp, err := http.Get(url)
		require.NoError(t, err)
		defer resp.Body.Close()
		require.Equal(t, http.StatusOK, resp.StatusCode)
		p := expfmt.NewTextParser(model.LegacyValidation)
		mfs, err := p.TextToMetricFamilies(resp.Body)
		require.NoError(t, err)
		return mfs
	}
	var mfs map[string]*dto.MetricFamily
	require.Eventually(t, func() bool {
		mfs = scrape()
		mf := mfs["kfsdb_worker_completed_total"]
		return mf != nil && mf.Metric[0].GetCounter().GetValue() == float64(len(attempts))
	}, 15*time.Second, 50*time.Millisecond, written())
	for _, name := range []string{"kfsdb_source_fetched_leases_total", "kfsdb_statement_duration_seconds",
		"kfsdb_attempts", "kfsdb_outbox_due", "kfsdb_outbox_oldest_due_age_seconds", "go_goroutines"} {
		require.Contains(t, mfs, name)
	}
	var fetches bool
	for _, m := range mfs["kfsdb_statement_duration_seconds"].Metric {
		fetches = fetches || (m.Label[0].GetValue() == "FetchLeases" && m.GetHistogram().GetSampleCount() > 0)
	}
	require.True(t, fetches, "no FetchLeases statements observed")
	// Work's Metrics (a tee of its summary counts and Prometheus) passes
	// the worker's durations on.
	took := mfs["kfsdb_attempt_start_to_succeeded_seconds"]
	require.NotNil(t, took)
	require.EqualValues(t, len(attempts), took.Metric[0].GetHistogram().GetSampleCount())
	// The backlog is sampled at most every 15 s: the first scrape's sample
	// may predate the completions, so only its presence is checked.
	require.Len(t, mfs["kfsdb_attempts"].Metric, 8)

	stop()
	select {
	case err := <-done:
		require.NoError(t, err)
	case <-time.After(30 * time.Second):
		t.Fatal("work did not stop")
	}
	require.Contains(t, written(), "worker_completed")
	_, err := http.Get(url) //nolint:bodyclose // fails: the server is shut down
	require.Error(t, err, "the metrics server still answers after Work returned")
}
