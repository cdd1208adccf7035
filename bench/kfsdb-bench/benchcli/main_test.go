package benchcli

import (
	"bytes"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/knowledgefs/kfsdb/tests/pgtest"
	"github.com/knowledgefs/kfsdb/tests/testfactory"
)

func TestMain(m *testing.M) {
	pgtest.Main(m)
}

func noEnv(string) string { return "" }

// requireValidateErr is testfactory.RequireValidateErr.
var requireValidateErr = testfactory.RequireValidateErr

// TestMainUsageErrorsExitTwo: bad command lines exit 2 before anything
// runs (work's and bench's own cases: their tests).
func TestMainUsageErrorsExitTwo(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{nil, {"frobnicate"}, {"migrate", "up"}, {"relay"}, {"relay", "extra"},
		{"relay", "--database-url", "postgres://u@h/db", "--bogus"}} {
		var stdout, stderr bytes.Buffer
		code := Main(t.Context(), args, &stdout, &stderr, noEnv)
		require.Equal(t, 2, code, "args %q: %s", args, stderr.String())
		require.Contains(t, stderr.String(), "kfsdb-bench: ", "args %q", args)
	}
}

// TestHelpSaysWhatItIsFor: the usage names the three commands and warns
// against a production database.
func TestHelpSaysWhatItIsFor(t *testing.T) {
	t.Parallel()
	var stdout, stderr bytes.Buffer
	require.Equal(t, 0, Main(t.Context(), []string{"--help"}, &stdout, &stderr, noEnv))
	for _, want := range []string{"\n  work ", "\n  relay ", "\n  bench ", "Never point work or relay at a production database", "deploy binary, kfsdb"} {
		require.Contains(t, stdout.String(), want)
	}
}
