package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/user"
	"strconv"
	"sync"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/knowledgefs/kfsdb/cmd/kfsdb/ops"
)

// Where the CLI's audit lines go: always the operator's stderr, and
// optionally a file and the local syslog, which outlive the terminal.
const (
	// EnvAuditFile names the file audit lines are appended to when
	// --audit-file is not given.
	EnvAuditFile = "KFSDB_AUDIT_FILE"
	// EnvAuditSyslog, set to true (or 1), sends audit lines to the local
	// syslog when --audit-syslog is not given.
	EnvAuditSyslog = "KFSDB_AUDIT_SYSLOG"
)

// auditFlags are the persistent --audit-file and --audit-syslog.
type auditFlags struct {
	file   string
	syslog bool
}

// auditSink is where one kfsdb run's audit lines go: stderr, and the file
// and syslog the flags or the environment name. Each line reaches each
// destination in one write (slog's handlers write a record at once; the
// file is opened O_APPEND, so lines of concurrent commands do not
// interleave). The first failed write is kept: the command then fails,
// for a change that is not in the audit log must not look like a success.
type auditSink struct {
	dests   []io.Writer
	closers []io.Closer

	mu  sync.Mutex
	err error
}

// openAuditSink opens the destinations f and getenv name beside stderr:
// the file appended to, created 0600, and refused when group or others
// may read or write it; the local syslog, refused with a clear error when
// the host has none.
func openAuditSink(f auditFlags, stderr io.Writer, getenv func(string) string) (*auditSink, error) {
	s := &auditSink{dests: []io.Writer{stderr}}
	file := f.file
	if file == "" && getenv != nil {
		file = getenv(EnvAuditFile)
	}
	if file != "" {
		out, err := openAuditFile(file)
		if err != nil {
			return nil, err
		}
		s.dests, s.closers = append(s.dests, out), append(s.closers, out)
	}
	useSyslog := f.syslog
	if !useSyslog && getenv != nil && getenv(EnvAuditSyslog) != "" {
		var err error
		if useSyslog, err = strconv.ParseBool(getenv(EnvAuditSyslog)); err != nil {
			s.close()
			return nil, fmt.Errorf("%w: $%s=%q: want true or false", ErrUsage, EnvAuditSyslog, getenv(EnvAuditSyslog))
		}
	}
	if useSyslog {
		w, err := dialSyslog()
		if err != nil {
			s.close()
			return nil, err
		}
		s.dests, s.closers = append(s.dests, w), append(s.closers, w)
	}
	return s, nil
}

// ErrAuditFileMode is returned when the audit file may be read or
// written by others than its owner.
var ErrAuditFileMode = errors.New("audit file open to others")

// openAuditFile opens path for appending, creating it 0600.
func openAuditFile(path string) (*os.File, error) {
	out, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("could not open the audit file: %w", err)
	}
	fi, err := out.Stat()
	switch {
	case err != nil:
		_ = out.Close()
		return nil, fmt.Errorf("could not open the audit file: %w", err)
	case !fi.Mode().IsRegular():
		_ = out.Close()
		return nil, fmt.Errorf("could not open the audit file: %s is not a regular file", path)
	case fi.Mode().Perm()&0o077 != 0:
		_ = out.Close()
		return nil, fmt.Errorf("%w: %s has mode %04o; an audit log must be readable and writable by its owner only (chmod 600 %s)",
			ErrAuditFileMode, path, fi.Mode().Perm(), path)
	}
	return out, nil
}

// Write writes p, one whole audit line, to every destination, keeping the
// first error.
func (s *auditSink) Write(p []byte) (int, error) { return s.writeFrom(0, p) }

// durable is where the console's audit lines go beyond its own output:
// the file and syslog, not stderr; nil when neither was asked for.
func (s *auditSink) durable() io.Writer {
	if s == nil || len(s.dests) < 2 {
		return nil
	}
	return durableSink{s}
}

// durableSink is an auditSink's destinations but stderr.
type durableSink struct{ s *auditSink }

func (d durableSink) Write(p []byte) (int, error) { return d.s.writeFrom(1, p) }

// writeFrom writes p to the destinations from the first-th on.
func (s *auditSink) writeFrom(first int, p []byte) (int, error) {
	var errs []error
	for _, w := range s.dests[first:] {
		if _, err := w.Write(p); err != nil {
			errs = append(errs, err)
		}
	}
	if err := errors.Join(errs...); err != nil {
		s.mu.Lock()
		if s.err == nil {
			s.err = fmt.Errorf("could not write the audit line: %w", err)
		}
		s.mu.Unlock()
		return 0, err
	}
	return len(p), nil
}

// close closes the file and syslog and returns the first write error.
func (s *auditSink) close() error {
	for _, c := range s.closers {
		_ = c.Close()
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.err
}

// writeAudit writes l to w, when w is set (options without one audit
// nothing): who is the operating system user, from where this host.
func writeAudit(ctx context.Context, w io.Writer, l ops.AuditLine) {
	if w == nil {
		return
	}
	l.Session = "cli:unknown"
	if u, err := user.Current(); err == nil {
		l.Session = "cli:" + u.Username
	}
	l.Remote, _ = os.Hostname()
	l.Log(ctx, slog.New(slog.NewTextHandler(w, nil)))
}

// poolRole is the database role pool's statements run as, for an audit
// line; "" when it cannot be read (the change itself then fails too).
func poolRole(ctx context.Context, pool *pgxpool.Pool) string {
	var role string
	_ = pool.QueryRow(ctx, `SELECT current_user::text`).Scan(&role)
	return role
}

// consoleAuditLogger is the console's audit log: its output and, when
// set, audit (the file and syslog).
func consoleAuditLogger(out, audit io.Writer) *slog.Logger {
	if audit != nil {
		out = io.MultiWriter(out, audit)
	}
	return slog.New(slog.NewTextHandler(out, nil))
}
