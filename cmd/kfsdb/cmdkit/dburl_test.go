package cmdkit

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
		flags   databaseURLFlags
		getenv  func(string) string
		want    string
		warn    bool
		wantErr error
	}{
		"ArgvWithPassword":    {flags: urlFlags(withPassword, ""), want: withPassword, warn: true},
		"ArgvKeywordPassword": {flags: urlFlags("host=h password=s3cret", ""), want: "host=h password=s3cret", warn: true},
		"ArgvQueryPassword":   {flags: urlFlags("postgres://kfs@h/db?password=s3cret", ""), want: "postgres://kfs@h/db?password=s3cret", warn: true},
		"ArgvNoPassword":      {flags: urlFlags("postgres://kfs@h/db", ""), want: "postgres://kfs@h/db"},
		"File":                {flags: urlFlags("", private), want: withPassword},
		"Env":                 {flags: urlFlags("", ""), getenv: env, want: "postgres://env:pw1234@127.0.0.1:2/kfs"},
		"FileBeforeEnv":       {flags: urlFlags("", private), getenv: env, want: withPassword},
		"FileOpenToOthers":    {flags: urlFlags("", shared), wantErr: ErrSecretFileMode},
		"Both":                {flags: urlFlags(withPassword, private), wantErr: ErrUsage},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			var stderr bytes.Buffer
			err := tc.flags.resolve("kfsdb", &stderr, tc.getenv)
			if tc.wantErr != nil {
				require.True(t, errors.Is(err, tc.wantErr), "%v", err)
				require.NotContains(t, err.Error(), "s3cret")
				return
			}
			require.NoError(t, err)
			require.Equal(t, tc.want, *tc.flags.url)
			if tc.warn {
				require.Equal(t, argvPasswordWarning("kfsdb"), stderr.String())
			} else {
				require.Empty(t, stderr.String())
			}
		})
	}
}

// urlFlags are --database-url url and --database-url-file file.
func urlFlags(url, file string) databaseURLFlags {
	return databaseURLFlags{url: &url, file: file}
}
