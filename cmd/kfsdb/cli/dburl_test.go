package cli

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestDatabaseURLOutOfArgv: a password in --database-url is warned about;
// --database-url-file (0600, first line) and $DATABASE_URL are read
// without a warning; a file others may read is refused, and so are both
// flags at once.
func TestDatabaseURLOutOfArgv(t *testing.T) {
	t.Parallel()
	const withPassword = "postgres://kfs:s3cret@127.0.0.1:1/kfs"
	dir := t.TempDir()
	private := filepath.Join(dir, "url")
	require.NoError(t, os.WriteFile(private, []byte("  "+withPassword+"  \nsecond line\n"), 0o600))
	shared := filepath.Join(dir, "shared")
	require.NoError(t, os.WriteFile(shared, []byte(withPassword+"\n"), 0o600))
	require.NoError(t, os.Chmod(shared, 0o644))
	env := func(k string) string {
		if k == EnvDatabaseURL {
			return "postgres://env:pw1234@127.0.0.1:2/kfs"
		}
		return ""
	}
	for name, tc := range map[string]struct {
		r       runner
		want    string
		warn    bool
		wantErr error
	}{
		"ArgvWithPassword":    {r: runner{databaseURL: withPassword}, want: withPassword, warn: true},
		"ArgvKeywordPassword": {r: runner{databaseURL: "host=h password=s3cret"}, want: "host=h password=s3cret", warn: true},
		"ArgvQueryPassword":   {r: runner{databaseURL: "postgres://kfs@h/db?password=s3cret"}, want: "postgres://kfs@h/db?password=s3cret", warn: true},
		"ArgvNoPassword":      {r: runner{databaseURL: "postgres://kfs@h/db"}, want: "postgres://kfs@h/db"},
		"File":                {r: runner{databaseURLFile: private}, want: withPassword},
		"Env":                 {r: runner{getenv: env}, want: "postgres://env:pw1234@127.0.0.1:2/kfs"},
		"FileBeforeEnv":       {r: runner{databaseURLFile: private, getenv: env}, want: withPassword},
		"FileOpenToOthers":    {r: runner{databaseURLFile: shared}, wantErr: ErrSecretFileMode},
		"Both":                {r: runner{databaseURL: withPassword, databaseURLFile: private}, wantErr: ErrUsage},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			var stderr bytes.Buffer
			err := tc.r.resolveDatabaseURL(&stderr)
			if tc.wantErr != nil {
				require.True(t, errors.Is(err, tc.wantErr), "%v", err)
				require.NotContains(t, err.Error(), "s3cret")
				return
			}
			require.NoError(t, err)
			require.Equal(t, tc.want, tc.r.databaseURL)
			if tc.warn {
				require.Equal(t, argvPasswordWarning, stderr.String())
			} else {
				require.Empty(t, stderr.String())
			}
		})
	}
}

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
