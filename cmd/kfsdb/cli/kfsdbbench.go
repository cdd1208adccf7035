package cli

import (
	"context"
	"io"
	"log/slog"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/knowledgefs/kfsdb/observe"
)

// What kfsdb-bench (module bench/kfsdb-bench: work, relay, bench) shares
// with this binary's commands, so that its commands open, serve and check
// alike.

// MetricsListenUsage is the --metrics-listen flag's usage.
const MetricsListenUsage = metricsListenUsage

// ValidateDatabaseURL requires dsn and that pgx can parse it, as every
// command's options do; its error never shows the password.
func ValidateDatabaseURL(dsn string) error { return validateDatabaseURL(dsn) }

// ValidateMetricsListen accepts "" (off) or host:port.
func ValidateMetricsListen(addr string) error { return validateMetricsListen(addr) }

// OpenServedPool opens a command's pool on url with maxConns connections
// (0: pgx's default) and, when metricsAddr is set, the registry served at
// http://metricsAddr/metrics while the pool is open (reg is nil without
// metricsAddr); closeAll stops the server, then closes the pool.
func OpenServedPool(ctx context.Context, url string, maxConns int32, metricsAddr string, out io.Writer, log *slog.Logger) (pool *pgxpool.Pool, reg *prometheus.Registry, closeAll func(), err error) {
	return openServedPool(ctx, url, maxConns, metricsAddr, out, log)
}

// RuntimeMetrics registers the runtime counters on reg and returns a
// Metrics that feeds reg and, when counts is not nil, counts too.
func RuntimeMetrics(reg *prometheus.Registry, counts *observe.Counts) (observe.Metrics, error) {
	return runtimeMetrics(reg, counts)
}
