package cli

import (
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/spf13/cobra"

	"github.com/knowledgefs/kfsdb/cmd/kfsdb/cmdkit"
	"github.com/knowledgefs/kfsdb/repo"
)

// Pools open, and metrics are served beside them, through the command kit
// (cmdkit); these are its names and values as this package's commands use
// them.

// poolSpec says how a command's pool opens (cmdkit.PoolSpec).
type poolSpec = cmdkit.PoolSpec

// metricsServe says how a command serves its metrics (cmdkit.MetricsServe).
type metricsServe = cmdkit.MetricsServe

// metricsToken reads the metrics token (cmdkit.MetricsToken).
var metricsToken = cmdkit.MetricsToken

// redacted is err with dsn's password taken out of its text
// (cmdkit.Redacted).
var redacted = cmdkit.Redacted

// The metrics flags' and environment's names and texts (cmdkit's).
const (
	EnvMetricsToken     = cmdkit.EnvMetricsToken
	EnvMetricsTokenFile = cmdkit.EnvMetricsTokenFile
	MetricsListenUsage  = cmdkit.MetricsListenUsage
	MetricsProxyNote    = cmdkit.MetricsProxyNote
)

// ValidateMetricsListen accepts "" (off) or host:port, the latter only on
// loopback unless a strong metrics token is set
// (cmdkit.ValidateMetricsListen).
func ValidateMetricsListen(addr string) error { return cmdkit.ValidateMetricsListen(addr) }

// operatorPool is the small pool of an operator command: purge, attempts,
// outbox stats, stuck.
var operatorPool = poolSpec{MaxConns: 4}

// withPool is the runner of every command that works on a pool
// (cmdkit.WithPool), with a console's refused role (ConfinementError)
// reported as it is rather than as a failed connection.
func withPool(ctx context.Context, dsn string, spec poolSpec, fn func(*pgxpool.Pool) error) error {
	spec.PingError = confinementRefusal
	return cmdkit.WithPool(ctx, dsn, spec, fn)
}

// confinementRefusal is the error of a pool whose first ping failed: a
// ConfinementError (connected, and refused the role) as it is, else
// "could not connect".
func confinementRefusal(err error) error {
	var refused *ConfinementError
	if errors.As(err, &refused) {
		return refused
	}
	return fmt.Errorf("could not connect: %w", err)
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
