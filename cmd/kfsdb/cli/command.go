package cli

import (
	"errors"
	"fmt"
	"io"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/spf13/cobra"

	"github.com/knowledgefs/kfsdb/migrate/redact"
)

// What every kfsdb command shares: the runner, the database URL and the
// usage errors.

// EnvDatabaseURL names the environment variable read when --database-url is
// not given.
const EnvDatabaseURL = "DATABASE_URL"

// ErrUsage is returned by Run for bad command lines (unknown command,
// missing argument, invalid flag value); Main exits with status 2 for it.
var ErrUsage = errors.New("usage error")

// runner is what the commands of one kfsdb run share: the persistent
// --database-url, which the root's pre-run reads from --database-url-file
// or $DATABASE_URL when not given, the environment, the confirmations'
// input, and where audit lines go (the persistent --audit-file and
// --audit-syslog, opened by the root's pre-run).
type runner struct {
	databaseURL     string
	databaseURLFile string
	getenv          func(string) string
	stdin           io.Reader
	auditFlags      auditFlags
	// audit receives the audit lines of the commands that change
	// something; nil until the pre-run opens it.
	audit *auditSink
}

// auditWriter is where a command writes its audit lines: nil (none) when
// the pre-run did not run.
func (r *runner) auditWriter() io.Writer {
	if r.audit == nil {
		return nil
	}
	return r.audit
}

// ValidateDatabaseURL requires dsn and that pgx can parse it, as every
// command's options do (kfsdb-bench's too); its error never shows the
// password.
func ValidateDatabaseURL(dsn string) error {
	if dsn == "" {
		return fmt.Errorf("invalid options: DatabaseURL is required: pass --database-url-file, set $%s, or pass --database-url", EnvDatabaseURL)
	}
	if _, err := pgconn.ParseConfig(dsn); err != nil {
		return fmt.Errorf("invalid options: DatabaseURL is not a valid PostgreSQL URL: %s", redact.Text(err.Error(), dsn))
	}
	return nil
}

// exactArgs is a command's Args: n positional arguments, else its usage
// and wrong as a usage error.
func exactArgs(n int, wrong string) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		if len(args) != n {
			return usageError(cmd, wrong)
		}
		return nil
	}
}

// usageError prints cmd's usage on its stderr and returns msg as a usage
// error (exit 2), as a bad flag does.
func usageError(cmd *cobra.Command, msg string) error {
	fmt.Fprint(cmd.ErrOrStderr(), cmd.UsageString())
	return fmt.Errorf("%w: %s", ErrUsage, msg)
}

// envDatabaseURL returns $DATABASE_URL, or "" when getenv is nil.
func envDatabaseURL(getenv func(string) string) string {
	if getenv == nil {
		return ""
	}
	return getenv(EnvDatabaseURL)
}
