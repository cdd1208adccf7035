package cli_test

import (
	"bytes"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/knowledgefs/kfsdb/cmd/kfsdb/cli"
	"github.com/knowledgefs/kfsdb/repo"
	"github.com/knowledgefs/kfsdb/tests/pgtest"
)

func TestPurgeOptsValidate(t *testing.T) {
	t.Parallel()
	var out bytes.Buffer
	const url = "postgres://u@h/db"
	long := string(bytes.Repeat([]byte("t"), repo.MaxTenantIDLength+1))
	for name, tc := range map[string]struct {
		opts    cli.PurgeOpts
		wantErr string
	}{
		"MissingURL":        {cli.PurgeOpts{TenantID: "t", Out: &out}, "DatabaseURL is required"},
		"MissingTenant":     {cli.PurgeOpts{DatabaseURL: url, Out: &out}, "TenantID is required"},
		"LongTenant":        {cli.PurgeOpts{DatabaseURL: url, TenantID: long, Out: &out}, "TenantID must be at most 255"},
		"NegativeOlderThan": {cli.PurgeOpts{DatabaseURL: url, TenantID: "t", OlderThan: -time.Hour, Out: &out}, "OlderThan must be >= 0"},
		"BatchTooLarge":     {cli.PurgeOpts{DatabaseURL: url, TenantID: "t", BatchSize: repo.MaxPurgeBatch + 1, Out: &out}, "BatchSize must be 1..10000"},
		"NegativeBatch":     {cli.PurgeOpts{DatabaseURL: url, TenantID: "t", BatchSize: -1, Out: &out}, "BatchSize must be"},
		"MissingOut":        {cli.PurgeOpts{DatabaseURL: url, TenantID: "t"}, "Out is required"},
		"TenantAndAll":      {cli.PurgeOpts{DatabaseURL: url, TenantID: "t", AllTenants: true, Out: &out}, "exclude each other"},
		"NegativePause":     {cli.PurgeOpts{DatabaseURL: url, TenantID: "t", Pause: -time.Millisecond, Out: &out}, "Pause must be >= 0"},
		"ValidAllTenants":   {cli.PurgeOpts{DatabaseURL: url, AllTenants: true, Pause: time.Second, Out: &out}, ""},
		"Valid":             {cli.PurgeOpts{DatabaseURL: url, TenantID: "t", OlderThan: 24 * time.Hour, BatchSize: 10, Out: &out}, ""},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			requireValidateErr(t, tc.opts.Validate(), tc.wantErr)
		})
	}
}

func envWith(url string) func(string) string {
	return func(k string) string {
		if k == cli.EnvDatabaseURL {
			return url
		}
		return ""
	}
}

func TestPurgeDeletesOnlyTheTenantsOldTerminalAttempts(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	db := pgtest.NewDB(t)
	tenant, other := "tenant-purge", "tenant-keep"
	start := func(tenantID string, cancel bool) { startInTenant(t, db, tenantID, cancel) }
	for range 5 {
		start(tenant, true)
	}
	start(tenant, false)
	start(tenant, false)
	start(other, true)
	count := func(tenantID string) (n int) {
		t.Helper()
		require.NoError(t, db.Pool.QueryRow(ctx, `SELECT count(*) FROM document_compilation_attempts WHERE tenant_id = $1`, tenantID).Scan(&n))
		return n
	}
	purge := func(args ...string) string {
		t.Helper()
		var stdout, stderr bytes.Buffer
		code := cli.Main(ctx, append([]string{"purge", "--tenant", tenant}, args...), &stdout, &stderr, envWith(db.URL))
		require.Equal(t, 0, code, "stderr: %s", stderr.String())
		return stdout.String()
	}

	require.Contains(t, purge("--older-than", "1h"), "purged 0 terminal attempts")
	require.Equal(t, 7, count(tenant))

	out := purge("--older-than", "0s", "--batch", "2")
	require.Contains(t, out, `purged 5 terminal attempts of tenant "tenant-purge"`)
	require.Contains(t, out, "(3 batches of up to 2)")
	require.Equal(t, 2, count(tenant), "live attempts stay")
	require.Equal(t, 1, count(other), "other tenants stay")
	var outbox int
	require.NoError(t, db.Pool.QueryRow(ctx, `SELECT count(*) FROM document_compilation_outbox`).Scan(&outbox))
	require.Equal(t, 3, outbox, "outbox rows go with their attempts")
}
