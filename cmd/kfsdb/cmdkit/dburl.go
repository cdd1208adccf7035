package cmdkit

import (
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/knowledgefs/kfsdb/migrate/redact"
)

// The database URL comes from --database-url-file, $DATABASE_URL or, with
// a warning when it holds a password, --database-url: a command line is
// readable by every local user (ps, /proc/PID/cmdline), a file 0600 and
// the environment (/proc/PID/environ, the owner's only) are not.

// EnvDatabaseURL names the environment variable read when --database-url is
// not given.
const EnvDatabaseURL = "DATABASE_URL"

// ErrSecretFileMode is returned for a --database-url-file that group or
// others may read or write.
var ErrSecretFileMode = errors.New("database URL file open to others")

// argvPasswordWarning is what NAME prints when --database-url holds a
// password.
func argvPasswordWarning(name string) string {
	return name + ": warning: the password in --database-url is visible to every local user (ps); use --database-url-file or $" +
		EnvDatabaseURL + "\n"
}

// databaseURLFlags are a root's persistent --database-url and
// --database-url-file.
type databaseURLFlags struct {
	// url is --database-url, and once resolve ran, the URL itself.
	url *string
	// file is --database-url-file.
	file string
}

// resolve sets *f.url from, in order, --database-url (warning on stderr,
// as name, when it holds a password), --database-url-file and
// $DATABASE_URL. Both flags at once are a usage error.
func (f *databaseURLFlags) resolve(name string, stderr io.Writer, getenv func(string) string) error {
	switch {
	case *f.url != "" && f.file != "":
		return fmt.Errorf("%w: give --database-url or --database-url-file, not both", ErrUsage)
	case *f.url != "":
		if hasPassword(*f.url) {
			fmt.Fprint(stderr, argvPasswordWarning(name))
		}
	case f.file != "":
		url, err := readDatabaseURLFile(f.file)
		if err != nil {
			return err
		}
		*f.url = url
	default:
		*f.url = envDatabaseURL(getenv)
	}
	return nil
}

// ValidateDatabaseURL requires dsn and that pgx can parse it, as every
// command's options do (kfsdb's, kfsdb-bench's); its error never shows the
// password.
func ValidateDatabaseURL(dsn string) error {
	if dsn == "" {
		return fmt.Errorf("invalid options: DatabaseURL is required: pass --database-url-file, set $%s, or pass --database-url", EnvDatabaseURL)
	}
	return ValidateDatabaseURLSyntax(dsn)
}

// ValidateDatabaseURLSyntax requires that pgx can parse dsn, when given:
// the check of an optional URL (the demo's, without which it starts a
// throwaway server). Its error never shows the password.
func ValidateDatabaseURLSyntax(dsn string) error {
	if dsn == "" {
		return nil
	}
	if _, err := pgconn.ParseConfig(dsn); err != nil {
		return fmt.Errorf("invalid options: DatabaseURL is not a valid PostgreSQL URL: %s", redact.Text(err.Error(), dsn))
	}
	return nil
}

// hasPassword says whether dsn, a URL or a keyword/value string, holds a
// password: whether redact.Text would mask one.
func hasPassword(dsn string) bool {
	return redact.Text(dsn) != dsn
}

// envDatabaseURL returns $DATABASE_URL, or "" when getenv is nil.
func envDatabaseURL(getenv func(string) string) string {
	if getenv == nil {
		return ""
	}
	return getenv(EnvDatabaseURL)
}

// readDatabaseURLFile returns the first line of path, trimmed. The file
// must be readable by its owner only, as a token file must.
func readDatabaseURLFile(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", fmt.Errorf("could not read --database-url-file: %w", err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return "", fmt.Errorf("could not read --database-url-file: %w", err)
	}
	if fi.Mode().Perm()&0o077 != 0 {
		return "", fmt.Errorf("%w: %s has mode %04o; a file holding a database password must be readable by its owner only (chmod 600 %s)",
			ErrSecretFileMode, path, fi.Mode().Perm(), path)
	}
	// A URL is short: the first 64 KiB hold its line.
	raw, err := io.ReadAll(io.LimitReader(f, 64<<10))
	if err != nil {
		return "", fmt.Errorf("could not read --database-url-file: %w", err)
	}
	line, _, _ := strings.Cut(string(raw), "\n")
	if url := strings.TrimSpace(line); url != "" {
		return url, nil
	}
	return "", fmt.Errorf("%w: --database-url-file %s: its first line is empty", ErrUsage, path)
}
