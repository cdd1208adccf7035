package cmdkit

import (
	"bytes"
	"context"
	"errors"
	"testing"

	"github.com/spf13/cobra"
	"github.com/stretchr/testify/require"
)

// countedOpts counts its validations and refuses when bad.
type countedOpts struct {
	bad       bool
	validated int
}

func (o *countedOpts) Validate() error {
	o.validated++
	if o.bad {
		return errors.New("invalid options: Bad")
	}
	return nil
}

// TestRunCommandValidatesOnceBeforeRunning: refused options are a usage
// error and nothing runs; accepted ones are validated once, then run.
func TestRunCommandValidatesOnceBeforeRunning(t *testing.T) {
	t.Parallel()
	runs := 0
	run := func(context.Context, *countedOpts) error { runs++; return nil }

	bad := &countedOpts{bad: true}
	err := RunCommand(t.Context(), bad, run)
	require.ErrorIs(t, err, ErrUsage)
	require.EqualError(t, err, "usage error: invalid options: Bad")
	require.Equal(t, 0, runs)

	good := &countedOpts{}
	require.NoError(t, RunCommand(t.Context(), good, run))
	require.Equal(t, 1, good.validated)
	require.Equal(t, 1, runs)
}

// newTestRoot is a root with one command, sub, whose --workers it
// records with the database URL the root resolved.
func newTestRoot(env map[string]string, got *string) *cobra.Command {
	var url string
	root := NewRoot(&Root{Use: "kit", Long: "the kit's test binary", DatabaseURL: &url, Getenv: func(k string) string { return env[k] }})
	sub := &cobra.Command{Use: "sub", Args: NoArgs, RunE: func(*cobra.Command, []string) error { *got = url; return nil }}
	sub.Flags().Int("workers", 1, "workers")
	root.AddCommand(sub)
	return root
}

// TestRootCommandLines: the root resolves the database URL before a
// command runs, and answers bad command lines with usage errors, a
// single-dash long flag with a hint.
func TestRootCommandLines(t *testing.T) {
	t.Parallel()
	env := map[string]string{EnvDatabaseURL: "postgres://env@h/db"}
	for _, tc := range []struct {
		args    []string
		wantURL string
		wantErr string
	}{
		{[]string{"sub"}, "postgres://env@h/db", ""},
		{[]string{"sub", "--database-url", "postgres://flag@h/db"}, "postgres://flag@h/db", ""},
		{[]string{"--database-url", "postgres://flag@h/db", "sub", "--workers", "3"}, "postgres://flag@h/db", ""},
		{nil, "", "usage error: no command"},
		{[]string{"frobnicate"}, "", `usage error: unknown command "frobnicate"`},
		{[]string{"sub", "extra"}, "", "usage error: sub takes no arguments"},
		{[]string{"sub", "--bogus"}, "", "usage error: unknown flag: --bogus"},
		{[]string{"sub", "-workers", "3"}, "", "usage error: unknown shorthand flag: 'w' in -workers (long flags take two dashes: --workers)"},
		{[]string{"sub", "-w", "3"}, "", "usage error: unknown shorthand flag: 'w' in -w"},
	} {
		var got string
		var stdout, stderr bytes.Buffer
		err := Execute(t.Context(), newTestRoot(env, &got), tc.args, &stdout, &stderr)
		if tc.wantErr != "" {
			require.ErrorIs(t, err, ErrUsage, "args %q", tc.args)
			require.EqualError(t, err, tc.wantErr, "args %q", tc.args)
			require.Equal(t, 2, ExitCode("kit", err, &bytes.Buffer{}, nil), "args %q", tc.args)
			continue
		}
		require.NoError(t, err, "args %q", tc.args)
		require.Equal(t, tc.wantURL, got, "args %q", tc.args)
	}
}
