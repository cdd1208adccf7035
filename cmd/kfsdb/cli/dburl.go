package cli

import (
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/knowledgefs/kfsdb/migrate/redact"
)

// The database URL comes from --database-url-file, $DATABASE_URL or, with
// a warning when it holds a password, --database-url: a command line is
// readable by every local user (ps, /proc/PID/cmdline), a file 0600 and
// the environment (/proc/PID/environ, the owner's only) are not.

// ErrSecretFileMode is returned for a --database-url-file that group or
// others may read or write.
var ErrSecretFileMode = errors.New("database URL file open to others")

// argvPasswordWarning is printed when --database-url holds a password.
const argvPasswordWarning = "kfsdb: warning: the password in --database-url is visible to every local user (ps); use --database-url-file or $" +
	EnvDatabaseURL + "\n"

// resolveDatabaseURL sets r.databaseURL from, in order, --database-url
// (warning on stderr when it holds a password), --database-url-file and
// $DATABASE_URL. Both flags at once are a usage error.
func (r *runner) resolveDatabaseURL(stderr io.Writer) error {
	switch {
	case r.databaseURL != "" && r.databaseURLFile != "":
		return fmt.Errorf("%w: give --database-url or --database-url-file, not both", ErrUsage)
	case r.databaseURL != "":
		if hasPassword(r.databaseURL) {
			fmt.Fprint(stderr, argvPasswordWarning)
		}
	case r.databaseURLFile != "":
		url, err := readDatabaseURLFile(r.databaseURLFile)
		if err != nil {
			return err
		}
		r.databaseURL = url
	default:
		r.databaseURL = envDatabaseURL(r.getenv)
	}
	return nil
}

// hasPassword says whether dsn, a URL or a keyword/value string, holds a
// password: whether redact.Text would mask one.
func hasPassword(dsn string) bool {
	return redact.Text(dsn) != dsn
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
