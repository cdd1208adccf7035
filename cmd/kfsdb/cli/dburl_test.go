package cli

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestArgvPasswordWarningOnStderr: through Main, the warning reaches
// stderr once, before the command's own error, and never the password.
func TestArgvPasswordWarningOnStderr(t *testing.T) {
	t.Parallel()
	var stdout, stderr bytes.Buffer
	code := Main(t.Context(), []string{"migrate", "sql", "--up", "--database-url", "postgres://kfs:s3cret@h/db"}, &stdout, &stderr, noEnv)
	require.Equal(t, 0, code, stderr.String())
	require.Equal(t, "kfsdb: warning: the password in --database-url is visible to every local user (ps); use --database-url-file or $DATABASE_URL\n", stderr.String())

	stderr.Reset()
	file := filepath.Join(t.TempDir(), "url")
	require.NoError(t, os.WriteFile(file, []byte("postgres://kfs:s3cret@h/db\n"), 0o600))
	code = Main(t.Context(), []string{"migrate", "sql", "--up", "--database-url-file", file}, &stdout, &stderr, noEnv)
	require.Equal(t, 0, code, stderr.String())
	require.Empty(t, stderr.String())
}
