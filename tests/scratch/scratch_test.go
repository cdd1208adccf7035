package scratch

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestRandomNameIsAValidDatabaseName(t *testing.T) {
	t.Parallel()
	a, b := RandomName("kfsdb_bench"), RandomName("kfsdb_bench")
	require.Regexp(t, `^kfsdb_bench_[0-9a-f]{16}$`, a)
	require.True(t, nameRe.MatchString(a))
	require.NotEqual(t, a, b)
}

func TestWithDatabaseReplacesTheDatabase(t *testing.T) {
	t.Parallel()
	for dsn, want := range map[string]string{
		"postgres://u:pw@h:5432/admin?sslmode=disable": "postgres://u:pw@h:5432/x?sslmode=disable",
		"postgresql://u@h/admin?dbname=admin":          "postgresql://u@h/x?dbname=x",
		"host=h user=u dbname=admin ":                  "host=h user=u dbname=admin dbname=x",
	} {
		require.Equal(t, want, withDatabase(dsn, "x"))
	}
}

func TestInvalidNamesNeverReachTheServer(t *testing.T) {
	t.Parallel()
	s := &Server{} // no pool: a name that got through would panic
	_, err := s.CreateDatabase(t.Context(), `x"; DROP DATABASE y; --`, "")
	require.ErrorContains(t, err, "invalid name")
	_, err = s.CreateDatabase(t.Context(), "ok", "Template")
	require.ErrorContains(t, err, "invalid template name")
	require.ErrorContains(t, s.DropDatabase(t.Context(), "1abc"), "invalid name")
}
