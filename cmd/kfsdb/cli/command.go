package cli

import (
	"io"

	"github.com/knowledgefs/kfsdb/cmd/kfsdb/cmdkit"
)

// What every kfsdb command shares: the runner, the database URL and the
// usage errors, the last two from the command kit (cmdkit), which
// kfsdb-bench and the demo build their commands with too.

// EnvDatabaseURL names the environment variable read when --database-url is
// not given (cmdkit.EnvDatabaseURL).
const EnvDatabaseURL = cmdkit.EnvDatabaseURL

// ErrUsage is returned by Run for bad command lines (unknown command,
// missing argument, invalid flag value); Main exits with status 2 for it.
// It is cmdkit.ErrUsage.
var ErrUsage = cmdkit.ErrUsage

// ErrSecretFileMode is returned for a --database-url-file that group or
// others may read or write (cmdkit.ErrSecretFileMode).
var ErrSecretFileMode = cmdkit.ErrSecretFileMode

// The kit's helpers under the names this package's commands call them by.
var (
	exactArgs  = cmdkit.ExactArgs
	usageError = cmdkit.UsageError
)

// runner is what the commands of one kfsdb run share: the persistent
// --database-url, which the root's pre-run reads from --database-url-file
// or $DATABASE_URL when not given (cmdkit.NewRoot), the environment, the
// confirmations' input, and where audit lines go (the persistent
// --audit-file and --audit-syslog, opened by the root's pre-run).
type runner struct {
	databaseURL string
	getenv      func(string) string
	stdin       io.Reader
	auditFlags  auditFlags
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
// password. It is cmdkit.ValidateDatabaseURL.
func ValidateDatabaseURL(dsn string) error { return cmdkit.ValidateDatabaseURL(dsn) }
