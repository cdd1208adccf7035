package prom_test

import (
	"encoding/json"
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/knowledgefs/kfsdb/adapters/prom"
)

// recordingRegisterer registers on a registry and keeps every collector,
// so the test can read the names of series that have no sample yet (a
// vector with no label values gathers nothing).
type recordingRegisterer struct {
	*prometheus.Registry
	collectors []prometheus.Collector
}

func (r *recordingRegisterer) Register(c prometheus.Collector) error {
	r.collectors = append(r.collectors, c)
	return r.Registry.Register(c)
}

func (r *recordingRegisterer) MustRegister(cs ...prometheus.Collector) {
	for _, c := range cs {
		if err := r.Register(c); err != nil {
			panic(err)
		}
	}
}

var fqName = regexp.MustCompile(`fqName: "([^"]+)"`)

// exposedNames returns every metric name the adapter's Metrics, Tracer
// and Collector expose, histograms with their _bucket, _sum and _count.
func exposedNames(t *testing.T) map[string]string {
	t.Helper()
	reg := &recordingRegisterer{Registry: prometheus.NewRegistry()}
	_, err := prom.New(reg, nil)
	require.NoError(t, err)
	_, err = prom.NewTracer(reg, nil)
	require.NoError(t, err)
	// Not sampled here: a pool that is never connected serves Describe.
	pool, err := pgxpool.New(t.Context(), "postgres://127.0.0.1:1/none")
	require.NoError(t, err)
	defer pool.Close()
	coll, err := prom.NewCollector(pool, nil)
	require.NoError(t, err)
	require.NoError(t, reg.Register(coll))

	names := map[string]string{}
	for _, c := range reg.collectors {
		ch := make(chan *prometheus.Desc, 64)
		go func() { c.Describe(ch); close(ch) }()
		for d := range ch {
			m := fqName.FindStringSubmatch(d.String())
			require.NotNil(t, m, "descriptor %s", d)
			names[m[1]] = m[1]
			if strings.HasSuffix(m[1], "_seconds") {
				for _, s := range []string{"_bucket", "_sum", "_count"} {
					names[m[1]+s] = m[1]
				}
			}
		}
	}
	require.NotEmpty(t, names)
	return names
}

// dashboard is the part of a Grafana dashboard JSON the test reads.
type dashboard struct {
	Inputs []struct {
		Name     string `json:"name"`
		PluginID string `json:"pluginId"`
	} `json:"__inputs"`
	Panels []struct {
		Type    string `json:"type"`
		Title   string `json:"title"`
		Targets []struct {
			Expr string `json:"expr"`
		} `json:"targets"`
	} `json:"panels"`
}

var metricRef = regexp.MustCompile(`\bkfsdb_[a-z_]+\b`)

// TestDashboardUsesExposedSeries reads docs/grafana/kfsdb-dashboard.json
// as Grafana's import would (a Prometheus data source input, panels with
// PromQL targets) and requires that every metric it queries is one the
// adapter exposes, and that every counter the runtime reports is on it.
func TestDashboardUsesExposedSeries(t *testing.T) {
	t.Parallel()
	raw, err := os.ReadFile("../../docs/grafana/kfsdb-dashboard.json")
	require.NoError(t, err)
	var d dashboard
	require.NoError(t, json.Unmarshal(raw, &d))
	require.Len(t, d.Inputs, 1)
	require.Equal(t, "prometheus", d.Inputs[0].PluginID)

	exposed := exposedNames(t)
	used := map[string]bool{}
	for _, p := range d.Panels {
		if p.Type == "row" {
			continue
		}
		require.NotEmpty(t, p.Targets, "panel %q has no query", p.Title)
		for _, tg := range p.Targets {
			require.Equal(t, strings.Count(tg.Expr, "("), strings.Count(tg.Expr, ")"), "panel %q: unbalanced %s", p.Title, tg.Expr)
			refs := metricRef.FindAllString(tg.Expr, -1)
			require.NotEmpty(t, refs, "panel %q: %s queries no kfsdb series", p.Title, tg.Expr)
			for _, ref := range refs {
				family, ok := exposed[ref]
				require.True(t, ok, "panel %q queries %s, which the adapter does not expose", p.Title, ref)
				used[family] = true
			}
		}
	}
	for name := range exposed {
		if exposed[name] == name && !used[name] {
			t.Errorf("%s is exposed but on no panel", name)
		}
	}
}
