package cmdkit

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// TestMetricsServerTimeouts is issue 39's N7: the metrics server bounds
// every connection, idle ones included, and lets a scrape run its course.
func TestMetricsServerTimeouts(t *testing.T) {
	t.Parallel()
	for name, d := range map[string]any{"ReadHeader": metricsTimeouts.ReadHeader, "Read": metricsTimeouts.Read, "Write": metricsTimeouts.Write, "Idle": metricsTimeouts.Idle} {
		require.Positive(t, d, name)
	}
	require.Greater(t, metricsTimeouts.Write, metricsScrapeTimeout)
}
