package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/spf13/cobra"

	"github.com/knowledgefs/kfsdb/migrate/redact"
	"github.com/knowledgefs/kfsdb/repo"
)

// poolSpec says how a command's pool opens: its connections, its session
// settings, and the metrics served beside it.
type poolSpec struct {
	// MaxConns bounds the pool. Defaults to 0: pgx's default.
	MaxConns int32
	// Metrics says where the pool's metrics are served. Defaults to the
	// zero value: not served.
	Metrics metricsServe
	// Out receives the metrics server's address line. Required with
	// Metrics.Addr.
	Out io.Writer
	// Log receives the metrics server's errors. Required with
	// Metrics.Addr.
	Log *slog.Logger
	// Tune, when not nil, adjusts the pool's config before it opens.
	Tune func(*pgxpool.Config)
}

// operatorPool is the small pool of an operator command: purge, attempts,
// outbox stats, stuck.
var operatorPool = poolSpec{MaxConns: 4}

// withPool is the runner of every command that works on a pool: it opens
// the pool on dsn as spec says, once, runs fn on it, then stops the
// metrics server and closes the pool. Its error never shows the password.
func withPool(ctx context.Context, dsn string, spec poolSpec, fn func(*pgxpool.Pool) error) error {
	pool, _, closeAll, err := openServedPoolWith(ctx, dsn, spec)
	if err != nil {
		return redacted(err, dsn)
	}
	defer closeAll()
	return redacted(fn(pool), dsn)
}

// OpenServedPool opens a command's pool on url with maxConns connections
// (0: pgx's default) and, when metricsAddr is set, the registry served at
// http://metricsAddr/metrics while the pool is open: the Go and process
// collectors, the statement tracer set on the pool and the backlog
// collector (reg is nil without metricsAddr). closeAll stops the server,
// then closes the pool. kfsdb-bench's work and relay open their pools
// with it; this binary's commands through withPool.
func OpenServedPool(ctx context.Context, url string, maxConns int32, metricsAddr string, out io.Writer, log *slog.Logger) (pool *pgxpool.Pool, reg *prometheus.Registry, closeAll func(), err error) {
	spec := poolSpec{MaxConns: maxConns, Metrics: metricsServe{Addr: metricsAddr}, Out: out, Log: log}
	if metricsAddr != "" {
		if spec.Metrics.Token, err = metricsToken(); err != nil {
			return nil, nil, nil, err
		}
	}
	return openServedPoolWith(ctx, url, spec)
}

// openServedPoolWith is OpenServedPool with the pool and its metrics as
// spec says.
func openServedPoolWith(ctx context.Context, url string, spec poolSpec) (pool *pgxpool.Pool, reg *prometheus.Registry, closeAll func(), err error) {
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
	if pool, err = openPool(ctx, cfg); err != nil {
		return nil, nil, nil, err
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

// onOperatorPool runs a read command (attempts list, outbox stats, stuck):
// --database-url must be valid (else a usage error), then fn runs on an
// operator pool that withPool opens, with the command's context and
// output.
func (r *runner) onOperatorPool(cmd *cobra.Command, fn func(ctx context.Context, db repo.DBTX, out io.Writer) error) error {
	if err := ValidateDatabaseURL(r.databaseURL); err != nil {
		return fmt.Errorf("%w: %w", ErrUsage, err)
	}
	return withPool(cmd.Context(), r.databaseURL, operatorPool, func(pool *pgxpool.Pool) error {
		return fn(cmd.Context(), pool, cmd.OutOrStdout())
	})
}

// openPool opens a pool on cfg and pings it, so that a wrong URL or a
// server that is down fails the command at once.
func openPool(ctx context.Context, cfg *pgxpool.Config) (*pgxpool.Pool, error) {
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("could not connect: %w", err)
	}
	if err := pool.Ping(ctx); err != nil {
		pool.Close()
		var refused *ConfinementError // connected, and refused the role
		if errors.As(err, &refused) {
			return nil, refused
		}
		return nil, fmt.Errorf("could not connect: %w", err)
	}
	return pool, nil
}

// redacted is err with dsn's password, and any URL's, taken out of its
// text: err itself, so that errors.Is still sees through it, when its text
// shows none.
func redacted(err error, dsn string) error {
	if err == nil {
		return nil
	}
	if text := redact.Text(err.Error(), dsn); text != err.Error() {
		return errors.New(text)
	}
	return err
}
