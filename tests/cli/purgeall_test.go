package cli_test

import (
	"bytes"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/knowledgefs/kfsdb/cmd/kfsdb/cli"
	"github.com/knowledgefs/kfsdb/tests/pgtest"
)

// TestPurgeAllTenantsPaced: `kfsdb purge --all-tenants --pause P` deletes
// every tenant's old terminal attempts, tenant by tenant in batches, and
// says how many tenants and batches, and the pause between them; live
// attempts stay. --tenant with --all-tenants, neither, and a negative
// --pause are usage errors (exit 2) that delete nothing.
func TestPurgeAllTenantsPaced(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	db := pgtest.NewDB(t)
	start := func(tenantID string, cancel bool) { startInTenant(t, db, tenantID, cancel) }
	for range 3 {
		start("tenant-a", true)
	}
	start("tenant-b", true)
	start("tenant-b", false)
	start("tenant-c", false)
	count := func() (n int) {
		t.Helper()
		require.NoError(t, db.Pool.QueryRow(ctx, `SELECT count(*) FROM document_compilation_attempts`).Scan(&n))
		return n
	}
	purge := func(args ...string) (int, string, string) {
		t.Helper()
		var stdout, stderr bytes.Buffer
		code := cli.Main(ctx, append([]string{"purge"}, args...), &stdout, &stderr, envWith(db.URL))
		return code, stdout.String(), stderr.String()
	}

	for _, args := range [][]string{
		{"--all-tenants", "--tenant", "tenant-a", "--older-than", "0s"},
		{"--older-than", "0s"},
		{"--all-tenants", "--older-than", "0s", "--pause", "-1s"},
	} {
		code, _, stderr := purge(args...)
		require.Equal(t, 2, code, "%v: stderr: %s", args, stderr)
	}
	require.Equal(t, 6, count())

	code, out, stderr := purge("--all-tenants", "--older-than", "0s", "--batch", "2", "--pause", "1ms")
	require.Equal(t, 0, code, "stderr: %s", stderr)
	// tenant-a: 2 + 1 (short: next tenant); tenant-b: 1 (short).
	require.Contains(t, out, "purged 4 terminal attempts of 2 tenants completed before")
	require.Contains(t, out, "(3 batches of up to 2, 1ms apart)")
	require.Contains(t, stderr, "action=purge")
	require.Equal(t, 2, count(), "live attempts stay")
}
