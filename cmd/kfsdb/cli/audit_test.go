package cli

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/knowledgefs/kfsdb/cmd/kfsdb/ops"
)

// TestAuditFileAppendsWholeLines: --audit-file is created 0600 and
// appended to, each line whole even when many commands write at once; a
// file others may read is refused; $KFSDB_AUDIT_FILE names it too.
func TestAuditFileAppendsWholeLines(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "audit.log")
	require.NoError(t, os.WriteFile(path, []byte("earlier line\n"), 0o600))
	env := func(k string) string {
		if k == EnvAuditFile {
			return path
		}
		return ""
	}
	const sinks, perSink = 8, 50
	var wg sync.WaitGroup
	var stderrs [sinks]bytes.Buffer
	for i := range sinks {
		s, err := openAuditSink(auditFlags{}, &stderrs[i], env)
		require.NoError(t, err)
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range perSink {
				writeAudit(t.Context(), s, ops.AuditLine{Tenant: "t", Action: "purge", Result: ops.OutcomeApplied, OperatorReason: strings.Repeat("r", 2000)})
			}
			assert.NoError(t, s.close())
		}()
	}
	wg.Wait()
	fi, err := os.Stat(path)
	require.NoError(t, err)
	require.Equal(t, os.FileMode(0o600), fi.Mode().Perm())
	raw, err := os.ReadFile(path)
	require.NoError(t, err)
	lines := strings.Split(strings.TrimSuffix(string(raw), "\n"), "\n")
	require.Len(t, lines, 1+sinks*perSink)
	require.Equal(t, "earlier line", lines[0])
	for _, l := range lines[1:] {
		require.Regexp(t, `^time=\S+ level=INFO msg=audit .* tenant=t .* action=purge .* result=applied reason="" operator_reason=`+strings.Repeat("r", 2000)+` db_role="" detail=""$`, l)
	}
	require.Equal(t, perSink, strings.Count(stderrs[0].String(), "msg=audit"), "stderr gets every line too")

	created := filepath.Join(t.TempDir(), "new.log")
	s, err := openAuditSink(auditFlags{file: created}, &bytes.Buffer{}, noEnv)
	require.NoError(t, err)
	require.NoError(t, s.close())
	fi, err = os.Stat(created)
	require.NoError(t, err)
	require.Equal(t, os.FileMode(0o600), fi.Mode().Perm())

	require.NoError(t, os.Chmod(created, 0o644))
	_, err = openAuditSink(auditFlags{file: created}, &bytes.Buffer{}, noEnv)
	require.True(t, errors.Is(err, ErrAuditFileMode), "%v", err)
}
