// Package promtest runs a command that serves Prometheus metrics (`kfsdb
// console --metrics-listen`, `kfsdb-bench work` and `relay`) in a test and
// reads its /metrics as Prometheus would: the deploy binary's tests and
// kfsdb-bench's share it.
package promtest

import (
	"context"
	"io"
	"net/http"
	"regexp"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/stretchr/testify/require"

	"github.com/knowledgefs/kfsdb/tests/testfactory"
)

// servingLine is the line a command prints once its metrics server
// listens.
var servingLine = regexp.MustCompile(`serving metrics on (http://\S+/metrics)`)

// Serve runs serve (a command given out) in a goroutine until the
// returned stop is called (or the test ends), and waits for its "serving
// metrics on" line: it returns the /metrics URL and a reader of what the
// command wrote. stop requires that the command returned nil and that its
// metrics server no longer answers.
func Serve(t *testing.T, serve func(ctx context.Context, out io.Writer) error) (url string, written func() string, stop func()) {
	t.Helper()
	out := &testfactory.SyncBuffer{}
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
	require.Eventually(t, func() bool {
		m := servingLine.FindStringSubmatch(out.String())
		if m != nil {
			url = m[1]
		}
		return m != nil
	}, 10*time.Second, 10*time.Millisecond, out.String())
	return url, out.String, stop
}

// Scrape reads url as Prometheus would.
func Scrape(t *testing.T, url string) map[string]*dto.MetricFamily {
	t.Helper()
	return ScrapeWith(t, url, "")
}

// ScrapeWith reads url as Prometheus would, sending token (if not empty)
// as its bearer token.
func ScrapeWith(t *testing.T, url, token string) map[string]*dto.MetricFamily {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, url, nil)
	require.NoError(t, err)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	p := expfmt.NewTextParser(model.LegacyValidation)
	mfs, err := p.TextToMetricFamilies(resp.Body)
	require.NoError(t, err)
	return mfs
}

// CounterValue is a label-less counter's value, 0 when it is absent.
func CounterValue(mfs map[string]*dto.MetricFamily, name string) float64 {
	mf := mfs[name]
	if mf == nil || len(mf.Metric) == 0 {
		return 0
	}
	return mf.Metric[0].GetCounter().GetValue()
}

// StatementCount is how many statements named query the statement
// histogram (kfsdb_statement_duration_seconds) saw.
func StatementCount(mfs map[string]*dto.MetricFamily, query string) uint64 {
	var n uint64
	for _, m := range mfs["kfsdb_statement_duration_seconds"].GetMetric() {
		if m.Label[0].GetValue() == query {
			n += m.GetHistogram().GetSampleCount()
		}
	}
	return n
}
