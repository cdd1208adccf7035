package cli_test

import (
	"encoding/json"
	"math"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/knowledgefs/kfsdb/cmd/kfsdb/cli"
	"github.com/knowledgefs/kfsdb/cmd/kfsdb/ops"
	"github.com/knowledgefs/kfsdb/repo"
	"github.com/knowledgefs/kfsdb/tests/pgtest"
)

// `kfsdb tenant` (issue 41, item 4): a tenant's cap, rate and pause set,
// shown and lifted from the command line, each change audited.

func TestTenantCommandsRefuseBadInput(t *testing.T) {
	t.Parallel()
	const url = "postgres://u@h/db"
	long := strings.Repeat("t", repo.MaxTenantIDLength+1)
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"tenant"}, "needs a subcommand"},
		{[]string{"tenant", "delete", "t"}, "want limits, set-limit"},
		{[]string{"tenant", "pause"}, "pause takes one tenant"},
		{[]string{"tenant", "resume", "a", "b"}, "resume takes one tenant"},
		{[]string{"tenant", "pause", long}, "TenantID must be at most 255"},
		{[]string{"tenant", "set-limit", "t"}, "give MaxRunning, Rate or both"},
		{[]string{"tenant", "set-limit", "t", "--max-running", "-1"}, "MaxRunning must be > 0"},
		{[]string{"tenant", "set-limit", "t", "--rate", "-2"}, "Rate must be leases per second"},
		{[]string{"tenant", "set-limit", "t", "--rate", "NaN"}, "Rate must be leases per second"},
		{[]string{"tenant", "set-limit", "t", "--rate", "2e6"}, "at most 1000000"},
		{[]string{"tenant", "set-limit", "t", "--max-running", "2", "--burst", "3"}, "Burst goes with Rate"},
		{[]string{"tenant", "set-limit", "t", "--rate", "1", "--burst", "-3"}, "Burst must be 1..1000000"},
		{[]string{"tenant", "set-limit", "t", "--rate", "fast"}, "invalid argument"},
		{[]string{"tenant", "pause", "t", "--rate", "1"}, "unknown flag"},
		{[]string{"tenant", "limits", "a", "b"}, "limits takes at most one tenant"},
	} {
		code, _, stderr := runCmd(t, url, "", tc.args...)
		require.Equal(t, 2, code, "%q: %s", tc.args, stderr)
		require.Contains(t, stderr, tc.want, "%q", tc.args)
	}
	// A tenant id that repo refuses (a NUL) is bad input too: exit 2,
	// before any change.
	db := pgtest.NewDB(t)
	code, _, stderr := runCmd(t, db.URL, "", "tenant", "pause", "a\x00b")
	require.Equal(t, 2, code, stderr)
	require.Contains(t, stderr, "invalid input: TenantID")

	// The options, called directly.
	for name, tc := range map[string]struct {
		opts    cli.TenantChangeOpts
		wantErr string
	}{
		"MissingURL":      {cli.TenantChangeOpts{TenantID: "t", TenantChange: ops.TenantChange{Action: ops.TenantPause}, Out: &strings.Builder{}}, "DatabaseURL is required"},
		"MissingOut":      {cli.TenantChangeOpts{DatabaseURL: url, TenantID: "t", TenantChange: ops.TenantChange{Action: ops.TenantPause}}, "Out is required"},
		"UnknownAction":   {cli.TenantChangeOpts{DatabaseURL: url, TenantID: "t", TenantChange: ops.TenantChange{Action: "tenant-delete"}, Out: &strings.Builder{}}, `Action "tenant-delete"`},
		"RateOnPause":     {cli.TenantChangeOpts{DatabaseURL: url, TenantID: "t", TenantChange: ops.TenantChange{Action: ops.TenantPause, Rate: 1}, Out: &strings.Builder{}}, "go with tenant-set-limit only"},
		"ClearOnResume":   {cli.TenantChangeOpts{DatabaseURL: url, TenantID: "t", TenantChange: ops.TenantChange{Action: ops.TenantResume, ClearCap: true}, Out: &strings.Builder{}}, "go with tenant-clear-limit only"},
		"InfiniteRate":    {cli.TenantChangeOpts{DatabaseURL: url, TenantID: "t", TenantChange: ops.TenantChange{Action: ops.TenantSetLimit, Rate: math.Inf(1)}, Out: &strings.Builder{}}, "Rate must be"},
		"ValidSetLimit":   {cli.TenantChangeOpts{DatabaseURL: url, TenantID: "t", TenantChange: ops.TenantChange{Action: ops.TenantSetLimit, Rate: 0.5}, Out: &strings.Builder{}}, ""},
		"ValidClearLimit": {cli.TenantChangeOpts{DatabaseURL: url, TenantID: "t", TenantChange: ops.TenantChange{Action: ops.TenantClearLimit, ClearRate: true}, Out: &strings.Builder{}}, ""},
	} {
		t.Run(name, func(t *testing.T) {
			requireValidateErr(t, tc.opts.Validate(), tc.wantErr)
		})
	}
}

// TestTenantCommands: set a cap and a rate (the default burst is one
// second's worth), show them (text and JSON), pause with a reason, see the
// pause in `outbox stats`, resume, lift; each change writes one audit line
// with the limits before and after, a refusal (resume a tenant that is not
// paused, lift a limit it has not) exits 1 and is audited as refused, and
// nothing else changed. Mutations caught: a refusal returned as nil (exit
// 0, result applied), the rate left out of LimitSummary.
func TestTenantCommands(t *testing.T) {
	t.Parallel()
	db := pgtest.NewDB(t)
	log := &auditLog{path: filepath.Join(t.TempDir(), "audit.log")}
	const tenant = "acme"

	line := log.requireOneLine(t, db.URL, 0, tenant, ops.TenantSetLimit, "applied", "noisy tenant", "tenant", "set-limit", tenant, "--max-running", "4", "--rate", "2.5")
	require.Contains(t, line, `from=none to="cap 4, 2.5 leases/s (burst 3)"`)
	code, out, stderr := runCmd(t, db.URL, "", "tenant", "limits")
	require.Equal(t, 0, code, stderr)
	require.Regexp(t, `(?m)^acme\s+4\s+2\.5\s+3\s+3\.00\s+-\s*$`, out)

	line = log.requireOneLine(t, db.URL, 0, tenant, ops.TenantPause, "applied", "billing hold", "tenant", "pause", tenant)
	require.Regexp(t, `to="cap 4, 2\.5 leases/s \(burst 3\), paused since \S+"`, line)
	line = log.requireOneLine(t, db.URL, 1, tenant, ops.TenantPause, "refused", "once more", "tenant", "pause", tenant)
	require.Contains(t, line, `reason="refused: the tenant is paused already"`)

	code, out, stderr = runCmd(t, db.URL, "", "tenant", "limits", tenant, "--json")
	require.Equal(t, 0, code, stderr)
	var limits []map[string]any
	require.NoError(t, json.Unmarshal([]byte(out), &limits), out)
	require.Len(t, limits, 1)
	require.Equal(t, map[string]any{"tenant_id": tenant, "max_running": 4.0, "leases_per_second": 2.5, "burst": 3.0, "tokens": 3.0,
		"paused": true, "paused_at": limits[0]["paused_at"], "pause_reason": "billing hold"}, limits[0])

	// outbox stats names the paused and the rate-limited tenants.
	code, out, stderr = runCmd(t, db.URL, "", "outbox", "stats")
	require.Equal(t, 0, code, stderr)
	require.Regexp(t, `(?m)^paused tenants .*\n  acme\s+since \S+ \(billing hold\)$`, out)
	require.Regexp(t, `(?m)^rate-limited tenants\n  acme\s+2\.5 leases/s, burst 3, 3\.00 tokens now$`, out)
	code, out, stderr = runCmd(t, db.URL, "", "outbox", "stats", "--json")
	require.Equal(t, 0, code, stderr)
	var stats struct {
		Paused      []map[string]any `json:"paused_tenants"`
		RateLimited []map[string]any `json:"rate_limited_tenants"`
	}
	require.NoError(t, json.Unmarshal([]byte(out), &stats), out)
	require.Len(t, stats.Paused, 1)
	require.Len(t, stats.RateLimited, 1)
	code, out, _ = runCmd(t, db.URL, "", "outbox", "stats", "--tenant", "other")
	require.Equal(t, 0, code)
	require.Contains(t, out, "paused tenants: none\nrate-limited tenants: none\n", "--tenant shows that tenant's limits alone")

	log.requireOneLine(t, db.URL, 0, tenant, ops.TenantResume, "applied", "bill paid", "tenant", "resume", tenant)
	line = log.requireOneLine(t, db.URL, 1, tenant, ops.TenantResume, "refused", "by mistake", "tenant", "resume", tenant)
	require.Contains(t, line, `reason="refused: the tenant is not paused"`)
	line = log.requireOneLine(t, db.URL, 0, tenant, ops.TenantClearLimit, "applied", "calm again", "tenant", "clear-limit", tenant, "--rate")
	require.Contains(t, line, `from="cap 4, 2.5 leases/s (burst 3)" to="cap 4"`)
	log.requireOneLine(t, db.URL, 1, tenant, ops.TenantClearLimit, "refused", "by mistake", "tenant", "clear-limit", tenant, "--rate")
	line = log.requireOneLine(t, db.URL, 0, tenant, ops.TenantClearLimit, "applied", "all clear", "tenant", "clear-limit", tenant)
	require.Contains(t, line, `from="cap 4" to=none`)
	code, out, _ = runCmd(t, db.URL, "", "tenant", "limits")
	require.Equal(t, 0, code)
	require.Equal(t, "no tenant is limited\n", out)

	// A change that fails (no server answers) is audited as failed.
	code, _, stderr = runCmd(t, "postgres://kfsdb@127.0.0.1:1/none?connect_timeout=5", "", "--audit-file", log.path, "tenant", "pause", tenant)
	require.Equal(t, 1, code, stderr)
	lines := log.next(t)
	require.Len(t, lines, 1)
	require.Contains(t, lines[0], "tenant=acme attempt=\"\" action=tenant-pause from=\"\" to=\"\" result=failed")
}
