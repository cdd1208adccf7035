package cli

import (
	"bytes"
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/knowledgefs/kfsdb/cmd/kfsdb/httpguard"
	"github.com/knowledgefs/kfsdb/repo"
)

// TestExitCodeSaysNameOnceAndUsageIsTwo: an error from repo's validation
// (a --tenant of 300 characters, a zero --space) is bad usage, exit 2, and
// its "kfsdb: " is not said twice. TestMainUsageErrorsExitTwo missed it:
// its command lines are refused while parsing, and repo refuses such
// values only after the command has connected to a database; this needs
// none, and checks what stderr says, not only the code.
func TestExitCodeSaysNameOnceAndUsageIsTwo(t *testing.T) {
	t.Parallel()
	input := &repo.InputError{Field: "TenantID", Reason: "must be at most 255 characters"}
	for _, tc := range []struct {
		name string
		err  error
		code int
		line string
	}{
		{"InputError", input, 2, "kfsdb: invalid input: TenantID must be at most 255 characters"},
		{"WrappedInputError", fmt.Errorf("could not list attempts: %w", input), 2,
			"kfsdb: could not list attempts: kfsdb: invalid input: TenantID must be at most 255 characters"},
		{"Usage", fmt.Errorf("%w: --limit must be 1..1000", ErrUsage), 2, "kfsdb: usage error: --limit must be 1..1000"},
		{"RepoSentinel", fmt.Errorf("attempt x: %w", repo.ErrNotFound), 1, "kfsdb: attempt x: kfsdb: not found"},
		{"Bare", repo.ErrNotFound, 1, "kfsdb: not found"},
		// A secret or audit file others may read is the operator's to fix.
		{"SecretFileMode", fmt.Errorf("%w: u.txt has mode 0644", ErrSecretFileMode), 2, "kfsdb: database URL file open to others: u.txt has mode 0644"},
		{"AuditFileMode", fmt.Errorf("%w: a.log has mode 0644", ErrAuditFileMode), 2, "kfsdb: audit file open to others: a.log has mode 0644"},
		{"TokenFileMode", fmt.Errorf("read: %w", httpguard.ErrTokenFileMode), 2, "kfsdb: read: token file open to other users"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var stderr bytes.Buffer
			require.Equal(t, tc.code, ExitCode("kfsdb", tc.err, &stderr, noEnv))
			require.Equal(t, tc.line+"\n", stderr.String())
		})
	}
}

// TestMainUsageErrorsSayKfsdbOnce: every usage error Main reports without
// a database is one "kfsdb: usage error: …" line after the usage text,
// with exit status 2.
func TestMainUsageErrorsSayKfsdbOnce(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{nil, {"frobnicate"}, {"--bogus"}, {"migrate"}, {"migrate", "up"}, {"migrate", "sql"},
		{"attempts", "list"}, {"attempts", "list", "--tenant", "a", "--limit", "0", "--database-url", "postgres://u@h/db"},
		{"purge", "--database-url", "postgres://u@h/db", "--tenant", strings.Repeat("t", 300), "--older-than", "1h"},
		{"stuck", "extra"}, {"outbox"}, {"relay"}, {"demo"}} {
		var stdout, stderr bytes.Buffer
		require.Equal(t, 2, Main(t.Context(), args, &stdout, &stderr, noEnv), "args %q: %s", args, stderr.String())
		lines := strings.Split(strings.TrimSuffix(stderr.String(), "\n"), "\n")
		last := lines[len(lines)-1]
		require.True(t, strings.HasPrefix(last, "kfsdb: usage error: "), "args %q: %s", args, last)
		require.Equal(t, 1, strings.Count(stderr.String(), "kfsdb: "), "args %q: %s", args, stderr.String())
	}
}
