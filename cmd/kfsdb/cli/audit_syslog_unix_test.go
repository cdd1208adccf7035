//go:build !windows && !plan9

package cli

import (
	"bytes"
	"io"
	"log/slog"
	"log/syslog"
	"net"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/knowledgefs/kfsdb/cmd/kfsdb/ops"
)

// TestAuditSyslog: --audit-syslog sends each audit line to the local
// syslog as one message, authpriv.notice, tag kfsdb; with no syslog
// listening it fails the command before it runs, saying why. Both sides
// run against a socket of the test's own (syslogNew), whatever syslog the
// host has. Not parallel: it swaps syslogNew.
func TestAuditSyslog(t *testing.T) {
	defer func(orig func() (io.WriteCloser, error)) { syslogNew = orig }(syslogNew)
	sock := filepath.Join(t.TempDir(), "log")
	syslogNew = func() (io.WriteCloser, error) { return syslog.Dial("unixgram", sock, syslogPriority, "kfsdb") }

	var stdout, stderr bytes.Buffer
	code := Main(t.Context(), []string{"--audit-syslog", "migrate", "sql", "--up"}, &stdout, &stderr, noEnv)
	require.Equal(t, 1, code)
	require.Empty(t, stdout.String(), "the command did not run")
	require.Contains(t, stderr.String(), "--audit-syslog: this host has no local syslog")

	conn, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: sock, Net: "unixgram"})
	require.NoError(t, err)
	defer conn.Close()
	sink, err := openAuditSink(auditFlags{syslog: true}, io.Discard, noEnv)
	require.NoError(t, err)
	ops.AuditLine{Session: "cli:op", Tenant: "acme", Action: "purge", Result: "applied", OperatorReason: "retention\nforged"}.Log(t.Context(), slog.New(slog.NewTextHandler(sink, nil)))
	require.NoError(t, sink.close())
	buf := make([]byte, 4096)
	require.NoError(t, conn.SetReadDeadline(time.Now().Add(time.Minute)))
	n, err := conn.Read(buf)
	require.NoError(t, err)
	msg := string(buf[:n])
	// <85>: facility authpriv (10) × 8 + severity notice (5).
	require.True(t, strings.HasPrefix(msg, "<85>"), msg)
	require.Contains(t, msg, " kfsdb[")
	require.Regexp(t, `msg=audit .*tenant=acme .*action=purge .*result=applied`, msg)
	require.Equal(t, 1, strings.Count(strings.TrimSuffix(msg, "\n"), "\n")+1, "one line: %q", msg)
}
