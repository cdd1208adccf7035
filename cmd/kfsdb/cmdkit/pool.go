package cmdkit

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/knowledgefs/kfsdb/migrate/redact"
)

// PoolSpec says how a command's pool opens: its connections, its session
// settings, and the metrics served beside it.
type PoolSpec struct {
	// Log receives the metrics server's errors. Required with
	// Metrics.Addr.
	Log *slog.Logger
	// MaxConns bounds the pool. Defaults to 0: pgx's default.
	MaxConns int32
	// Metrics says where the pool's metrics are served. Defaults to the
	// zero value: not served.
	Metrics MetricsServe
	// Out receives the metrics server's address line. Required with
	// Metrics.Addr.
	Out io.Writer
	// PingError, when not nil, makes the error of the first ping that
	// failed: a refusal that must reach the operator as it is (kfsdb
	// console's confinement). Defaults to nil: "could not connect: ERR".
	PingError func(error) error
	// Tune, when not nil, adjusts the pool's config before it opens.
	Tune func(*pgxpool.Config)
}

// WithPool is the runner of every command that works on a pool: it opens
// the pool on dsn as spec says, once, runs fn on it, then stops the
// metrics server and closes the pool. Its error never shows the password.
func WithPool(ctx context.Context, dsn string, spec PoolSpec, fn func(*pgxpool.Pool) error) error {
	pool, _, closeAll, err := OpenPool(ctx, dsn, spec)
	if err != nil {
		return Redacted(err, dsn)
	}
	defer closeAll()
	return Redacted(fn(pool), dsn)
}

// OpenServedPool opens a command's pool on url with maxConns connections
// (0: pgx's default) and, when metricsAddr is set, the registry served at
// http://metricsAddr/metrics while the pool is open, with the token of
// MetricsToken: the Go and process collectors, the statement tracer set on
// the pool and the backlog collector (reg is nil without metricsAddr).
// closeAll stops the server, then closes the pool. kfsdb-bench's work and
// relay open their pools with it; kfsdb's commands through WithPool.
func OpenServedPool(ctx context.Context, url string, maxConns int32, metricsAddr string, out io.Writer, log *slog.Logger) (pool *pgxpool.Pool, reg *prometheus.Registry, closeAll func(), err error) {
	spec := PoolSpec{MaxConns: maxConns, Metrics: MetricsServe{Addr: metricsAddr}, Out: out, Log: log}
	if metricsAddr != "" {
		if spec.Metrics.Token, err = MetricsToken(); err != nil {
			return nil, nil, nil, err
		}
	}
	return OpenPool(ctx, url, spec)
}

// OpenPool is OpenServedPool with the pool and its metrics as spec says.
// The pool is pinged, so that a wrong URL or a server that is down fails
// the command at once.
func OpenPool(ctx context.Context, url string, spec PoolSpec) (pool *pgxpool.Pool, reg *prometheus.Registry, closeAll func(), err error) {
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("could not parse database URL: %w", err)
	}
	if spec.MaxConns > 0 {
		cfg.MaxConns = spec.MaxConns
	}
	if spec.Tune != nil {
		spec.Tune(cfg)
	}
	if spec.Metrics.Addr != "" {
		if reg, err = newMetricsRegistry(cfg); err != nil {
			return nil, nil, nil, err
		}
	}
	if pool, err = pgxpool.NewWithConfig(ctx, cfg); err != nil {
		return nil, nil, nil, fmt.Errorf("could not connect: %w", err)
	}
	if err := pool.Ping(ctx); err != nil {
		pool.Close()
		if spec.PingError != nil {
			return nil, nil, nil, spec.PingError(err)
		}
		return nil, nil, nil, fmt.Errorf("could not connect: %w", err)
	}
	if reg == nil {
		return pool, nil, pool.Close, nil
	}
	stop, err := serveMetrics(reg, pool, spec.Metrics, spec.Out, spec.Log)
	if err != nil {
		pool.Close()
		return nil, nil, nil, err
	}
	return pool, reg, func() { stop(); pool.Close() }, nil
}

// Redacted is err with dsn's password, and any URL's, taken out of its
// text: err itself, so that errors.Is still sees through it, when its text
// shows none.
func Redacted(err error, dsn string) error {
	if err == nil {
		return nil
	}
	if text := redact.Text(err.Error(), dsn); text != err.Error() {
		return errors.New(text)
	}
	return err
}
