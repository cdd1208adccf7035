package cli_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/knowledgefs/kfsdb/cmd/kfsdb/cli"
	"github.com/knowledgefs/kfsdb/cmd/kfsdb/ops"
	"github.com/knowledgefs/kfsdb/kfstype"
	"github.com/knowledgefs/kfsdb/repo"
	"github.com/knowledgefs/kfsdb/tests/pgtest"
	"github.com/knowledgefs/kfsdb/tests/testfactory"
)

// runCmd runs a kfsdb command line with stdin and returns the exit code
// and both outputs.
func runCmd(t *testing.T, url, stdin string, args ...string) (int, string, string) {
	t.Helper()
	var stdout, stderr bytes.Buffer
	err := cli.RunWithInput(t.Context(), args, strings.NewReader(stdin), &stdout, &stderr, envWith(url))
	code := cli.ExitCode("kfsdb", err, &stderr, envWith(url))
	return code, stdout.String(), stderr.String()
}

func TestOperatorCommandsRefuseBadInput(t *testing.T) {
	t.Parallel()
	const url = "postgres://u@h/db"
	id := uuid.NewString()
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"attempts"}, "needs a subcommand"},
		{[]string{"attempts", "delete", "--tenant", "t", id}, "want list, show, cancel"},
		{[]string{"attempts", "show", id}, "TenantID is required (--tenant)"},
		{[]string{"attempts", "show", "--tenant", "t", "not-a-uuid"}, `"not-a-uuid" is not a UUID`},
		{[]string{"attempts", "show", "--tenant", "t"}, "one attempt id"},
		{[]string{"attempts", "cancel", id}, "TenantID is required"},
		{[]string{"attempts", "cancel", "--tenant", "t"}, "give 1..1000 attempt ids"},
		{[]string{"attempts", "cancel", "--tenant", "t", "--state", "failed", id}, "not both"},
		{[]string{"attempts", "cancel", "--tenant", "t", "--state", "broken"}, `unknown run state "broken"`},
		{[]string{"attempts", "list", "--tenant", "t", "--state", "running,nope"}, `unknown run state "nope"`},
		{[]string{"attempts", "list", "--tenant", "t", "--limit", "0"}, "--limit must be 1..1000"},
		{[]string{"attempts", "list", "--tenant", "t", "--after", "x.y"}, "bad cursor"},
		{[]string{"attempts", "list", "--tenant", "t", "--space", "nope"}, "not a UUID"},
		{[]string{"attempts", "list"}, "--tenant is required"},
		{[]string{"outbox"}, "needs a subcommand: stats"},
		{[]string{"outbox", "stats", "--cap", "0"}, "--cap must be"},
		{[]string{"stuck", "--limit", "5000"}, "--limit must be"},
		{[]string{"stuck", "--pending-overdue", "-1s"}, "--pending-overdue > 0"},
	} {
		code, _, stderr := runCmd(t, url, "", tc.args...)
		require.Equal(t, 2, code, "%q: %s", tc.args, stderr)
		require.Contains(t, stderr, tc.want, "%q", tc.args)
	}
}

// operatorFixture is a tenant with attempts in several states and another
// tenant's attempt.
type operatorFixture struct {
	db                                   *pgtest.DB
	tenant                               string
	running, failed, succeeded, other    *kfstype.Attempt
	pendingA, pendingB, pendingC, queued *kfstype.Attempt
}

func newOperatorFixture(t *testing.T) *operatorFixture {
	t.Helper()
	ctx := context.Background()
	db := pgtest.NewDB(t)
	drv := &testfactory.Driver{Repo: repo.New(nil), DB: db.Pool}
	tenant := "ops-" + uuid.NewString()[:8]
	scope := func(tenantID string) *testfactory.Scope {
		return testfactory.NewScope(ctx, t, db.Pool, &testfactory.ScopeOpts{TenantID: new(tenantID)})
	}
	f := &operatorFixture{db: db, tenant: tenant}
	// Queued first: the driver's dispatch claims every due outbox row.
	f.queued = drv.InState(ctx, t, scope(tenant), kfstype.RunStateQueued)
	f.running = drv.InState(ctx, t, scope(tenant), kfstype.RunStateRunning)
	f.failed = drv.InState(ctx, t, scope(tenant), kfstype.RunStateFailed)
	f.succeeded = drv.InState(ctx, t, scope(tenant), kfstype.RunStateSucceeded)
	f.pendingA = drv.InState(ctx, t, scope(tenant), kfstype.RunStateDispatchPending)
	f.pendingB = drv.InState(ctx, t, scope(tenant), kfstype.RunStateDispatchPending)
	f.pendingC = drv.InState(ctx, t, scope(tenant), kfstype.RunStateDispatchPending)
	f.other = drv.InState(ctx, t, scope("ops-other-"+uuid.NewString()[:8]), kfstype.RunStateDispatchPending)
	return f
}

func (f *operatorFixture) state(t *testing.T, id uuid.UUID) (kfstype.RunState, int32) {
	t.Helper()
	var s string
	var v int32
	require.NoError(t, f.db.Pool.QueryRow(context.Background(), `SELECT run_state, row_version FROM document_compilation_attempts WHERE id = $1`, id).Scan(&s, &v))
	return kfstype.RunState(s), v
}

func TestAttemptsShow(t *testing.T) {
	t.Parallel()
	f := newOperatorFixture(t)
	code, out, stderr := runCmd(t, f.db.URL, "", "attempts", "show", "--tenant", f.tenant, "--json", f.running.ID.String())
	require.Equal(t, 0, code, stderr)
	var v map[string]any
	require.NoError(t, json.Unmarshal([]byte(out), &v))
	require.Equal(t, f.running.ID.String(), v["id"])
	require.Equal(t, "running", v["run_state"])
	require.Equal(t, true, v["lease_held"])
	require.NotContains(t, out, "lease_token", "the lease token lets a reader act as the worker")
	require.NotContains(t, out, f.running.LeaseToken.String())
	require.Equal(t, "leased", v["outbox"].(map[string]any)["status"])
	require.NotEmpty(t, v["timeline"])

	code, out, _ = runCmd(t, f.db.URL, "", "attempts", "show", "--tenant", f.tenant, f.failed.ID.String())
	require.Equal(t, 0, code)
	require.Contains(t, out, "state        failed")
	require.Contains(t, out, "timeline")

	// Another tenant's attempt does not exist for this tenant.
	code, _, stderr = runCmd(t, f.db.URL, "", "attempts", "show", "--tenant", f.tenant, f.other.ID.String())
	require.Equal(t, 1, code)
	require.Contains(t, stderr, "not found")
}

// TestTextOutputEscapesControls: an error message and a worker id written
// by a hostile worker reach the terminal with their escape sequences
// escaped (no ESC, BEL or CR byte), and a NATS URL's credentials in an
// error are redacted.
func TestTextOutputEscapesControls(t *testing.T) {
	t.Parallel()
	f := newOperatorFixture(t)
	_, err := f.db.Pool.Exec(t.Context(), `UPDATE document_compilation_attempts
		SET last_error_message = CASE WHEN id = $1 THEN E'boom\x1b]0;owned\x07\x1b[2J\rfake line\u202e' ELSE last_error_message END,
		    worker_id = CASE WHEN id = $2 THEN E'w\x1b[31m' ELSE worker_id END
		WHERE id IN ($1, $2)`, f.failed.ID, f.running.ID)
	require.NoError(t, err)
	code, out, stderr := runCmd(t, f.db.URL, "", "attempts", "show", "--tenant", f.tenant, f.failed.ID.String())
	require.Equal(t, 0, code, stderr)
	require.Contains(t, out, `boom\x1b]0;owned\x07\x1b[2J\x0dfake line\u{202e}`)
	code, running, stderr := runCmd(t, f.db.URL, "", "attempts", "show", "--tenant", f.tenant, f.running.ID.String())
	require.Equal(t, 0, code, stderr)
	require.Contains(t, running, `w\x1b[31m`)
	out += running
	for _, c := range []string{"\x1b", "\x07", "\r", "\u202e"} {
		require.NotContains(t, out, c)
	}

	var buf bytes.Buffer
	cli.ExitCode("kfsdb", errors.New("dial nats://relay:s3cret@nats.example:4222: refused; then tls://tok3n@h2:4443\x1b[2J"), &buf, envWith(""))
	require.Equal(t, "kfsdb: dial nats://relay:xxxxx@nats.example:4222: refused; then tls://xxxxx@h2:4443\\x1b[2J\n", buf.String())
}

func TestAttemptsActions(t *testing.T) {
	t.Parallel()
	f := newOperatorFixture(t)
	ids := func(as ...*kfstype.Attempt) []string {
		var out []string
		for _, a := range as {
			out = append(out, a.ID.String())
		}
		return out
	}
	results := func(out string) map[uuid.UUID]ops.Result {
		var rs []ops.Result
		require.NoError(t, json.Unmarshal([]byte(out), &rs), out)
		m := map[uuid.UUID]ops.Result{}
		for _, r := range rs {
			m[r.AttemptID] = r
		}
		return m
	}

	t.Run("DryRunChangesNothing", func(t *testing.T) {
		before := map[uuid.UUID]int32{}
		for _, a := range []*kfstype.Attempt{f.running, f.succeeded, f.other} {
			_, before[a.ID] = f.state(t, a.ID)
		}
		code, out, stderr := runCmd(t, f.db.URL, "", append([]string{"attempts", "cancel", "--tenant", f.tenant, "--dry-run", "--json"},
			ids(f.running, f.succeeded, f.other)...)...)
		require.Equal(t, 1, code, "refusals are reported with status 1")
		require.Contains(t, stderr, "refused: 2 of 3 attempts")
		rs := results(out)
		require.Equal(t, ops.OutcomeWouldApply, rs[f.running.ID].Outcome)
		require.Equal(t, kfstype.RunStateCanceled, rs[f.running.ID].To)
		require.Equal(t, ops.OutcomeRefused, rs[f.succeeded.ID].Outcome)
		require.Contains(t, rs[f.succeeded.ID].Reason, "already succeeded")
		require.Equal(t, ops.OutcomeRefused, rs[f.other.ID].Outcome)
		require.Contains(t, rs[f.other.ID].Reason, "no such attempt for this tenant")
		for id, v := range before {
			_, now := f.state(t, id)
			require.Equal(t, v, now, "dry run changed %s", id)
		}
		require.NotContains(t, stderr, "msg=audit", "a dry run acts on nothing")
	})

	t.Run("BulkNeedsConfirmation", func(t *testing.T) {
		code, out, stderr := runCmd(t, f.db.URL, "no\n", append([]string{"attempts", "cancel", "--tenant", f.tenant}, ids(f.pendingA, f.pendingB)...)...)
		require.Equal(t, 1, code)
		require.Contains(t, out, "cancel 2 of 2 attempts of tenant "+f.tenant+"? Type yes")
		require.Contains(t, stderr, "aborted")
		st, _ := f.state(t, f.pendingA.ID)
		require.Equal(t, kfstype.RunStateDispatchPending, st)

		code, out, stderr = runCmd(t, f.db.URL, "yes\n", append([]string{"attempts", "cancel", "--tenant", f.tenant, "--reason", "operator: bad upload"},
			ids(f.pendingA, f.pendingB)...)...)
		require.Equal(t, 0, code, stderr)
		require.Contains(t, out, "applied: dispatch_pending → canceled")
		for _, a := range []*kfstype.Attempt{f.pendingA, f.pendingB} {
			st, _ := f.state(t, a.ID)
			require.Equal(t, kfstype.RunStateCanceled, st)
			testfactory.RequireInvariants(context.Background(), t, f.db.Pool, a.ID)
			// One audit line per attempt, on stderr.
			require.Regexp(t, `msg=audit at=\S+ session=cli:\S+ remote=\S+ forwarded_claim="" tenant=`+f.tenant+` attempt=`+a.ID.String()+
				` action=cancel from=dispatch_pending to=canceled result=applied reason="" operator_reason="operator: bad upload" db_role=\S+`, stderr)
		}

		// A refusal is audited too.
		code, _, stderr = runCmd(t, f.db.URL, "", "attempts", "cancel", "--tenant", f.tenant, f.pendingA.ID.String())
		require.Equal(t, 1, code)
		require.Regexp(t, `msg=audit .* attempt=`+f.pendingA.ID.String()+` action=cancel from=canceled to=canceled result=refused reason=".+"`, stderr)
	})

	t.Run("RetryBySelection", func(t *testing.T) {
		code, out, stderr := runCmd(t, f.db.URL, "", "attempts", "retry", "--tenant", f.tenant, "--state", "failed", "--yes", "--json")
		require.Equal(t, 0, code, stderr)
		rs := results(out)
		require.Len(t, rs, 1)
		require.Equal(t, ops.OutcomeApplied, rs[f.failed.ID].Outcome)
		require.Equal(t, kfstype.RunStateDispatchPending, rs[f.failed.ID].To)
		testfactory.RequireInvariants(context.Background(), t, f.db.Pool, f.failed.ID)
	})

	t.Run("SupersedeOne", func(t *testing.T) {
		code, out, stderr := runCmd(t, f.db.URL, "", "attempts", "supersede", "--tenant", f.tenant, f.queued.ID.String())
		require.Equal(t, 0, code, stderr)
		require.Contains(t, out, "applied: queued → superseded")
	})

	t.Run("ActsOnlyOnTheVersionRead", func(t *testing.T) {
		// The operator read pendingC; a worker's fetch leases it before
		// the cancel: the cancel is refused, not applied to a row the
		// operator did not see.
		r := repo.New(nil)
		seen, err := r.GetAttempt(context.Background(), f.db.Pool, &repo.GetAttemptParams{TenantID: f.tenant, AttemptID: f.pendingC.ID})
		require.NoError(t, err)
		fetched, err := r.FetchLeases(context.Background(), f.db.Pool, &repo.FetchLeasesParams{WorkerID: "w", BatchSize: 100})
		require.NoError(t, err)
		var leased []uuid.UUID
		for _, a := range fetched.Leased {
			leased = append(leased, a.Attempt.ID)
		}
		require.Contains(t, leased, f.pendingC.ID)
		res, err := ops.Do(context.Background(), r, f.db.Pool, ops.Cancel, seen, "")
		require.NoError(t, err)
		require.Equal(t, ops.OutcomeRefused, res.Outcome)
		require.Contains(t, res.Reason, "changed since it was read")
		st, _ := f.state(t, f.pendingC.ID)
		require.Equal(t, kfstype.RunStateRunning, st)
	})
}

// TestAttemptsRelease: release makes a deferred start's outbox row due
// now, at the version read, and writes an audit line; the reason is only
// audited, not stored; a row that is due already and an attempt that is
// not dispatch_pending are refused with the reason; release is not
// offered on every match (no --all). Mutation: ops' release row calling
// RetryFailed fails the applied case; Bulk set on it fails the --all case.
func TestAttemptsRelease(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := pgtest.NewDB(t)
	drv := &testfactory.Driver{Repo: repo.New(nil), DB: db.Pool}
	f := &operatorFixture{db: db, tenant: "ops-" + uuid.NewString()[:8]}
	scope := func() *testfactory.Scope {
		return testfactory.NewScope(ctx, t, db.Pool, &testfactory.ScopeOpts{TenantID: new(f.tenant)})
	}
	f.failed = drv.InState(ctx, t, scope(), kfstype.RunStateFailed)
	deferred := drv.Start(ctx, t, scope(), &testfactory.StartOpts{Deferred: new(true)})
	parked := func(id uuid.UUID) bool {
		var atInfinity bool
		require.NoError(t, db.Pool.QueryRow(ctx, `SELECT available_at = 'infinity' FROM document_compilation_outbox WHERE attempt_id = $1`, id).Scan(&atInfinity))
		return atInfinity
	}
	require.True(t, parked(deferred.ID))
	_, before := f.state(t, deferred.ID)

	code, out, stderr := runCmd(t, db.URL, "", "attempts", "release", "--tenant", f.tenant, "--dry-run", "--json", deferred.ID.String(), f.failed.ID.String())
	require.Equal(t, 1, code, "refusals are reported with status 1")
	require.Contains(t, stderr, "refused: 1 of 2 attempts")
	var rs []ops.Result
	require.NoError(t, json.Unmarshal([]byte(out), &rs), out)
	require.Len(t, rs, 2)
	require.Equal(t, ops.OutcomeWouldApply, rs[0].Outcome)
	require.Equal(t, kfstype.RunStateDispatchPending, rs[0].To)
	require.Equal(t, ops.OutcomeRefused, rs[1].Outcome)
	require.Contains(t, rs[1].Reason, "only a dispatch_pending attempt whose start was deferred can be released")
	require.True(t, parked(deferred.ID), "a dry run changes nothing")
	require.NotContains(t, stderr, "msg=audit", "a dry run acts on nothing")

	code, out, stderr = runCmd(t, db.URL, "", "attempts", "release", "--tenant", f.tenant, "--reason", "operator: go", deferred.ID.String())
	require.Equal(t, 0, code, stderr)
	require.Contains(t, out, "applied: dispatch_pending → dispatch_pending")
	require.False(t, parked(deferred.ID), "the outbox row is due")
	st, after := f.state(t, deferred.ID)
	require.Equal(t, kfstype.RunStateDispatchPending, st)
	require.Equal(t, before+1, after)
	testfactory.RequireInvariants(ctx, t, db.Pool, deferred.ID)
	require.Regexp(t, `msg=audit at=\S+ session=cli:\S+ remote=\S+ forwarded_claim="" tenant=`+f.tenant+` attempt=`+deferred.ID.String()+
		` action=release from=dispatch_pending to=dispatch_pending result=applied reason="" operator_reason="operator: go" db_role=\S+`, stderr)
	released, err := drv.Repo.GetAttempt(ctx, db.Pool, &repo.GetAttemptParams{TenantID: f.tenant, AttemptID: deferred.ID})
	require.NoError(t, err)
	require.Nil(t, released.LastErrorMessage, "release stores no reason")

	// Due already: the guarded statement refuses, and says why.
	code, out, stderr = runCmd(t, db.URL, "", "attempts", "release", "--tenant", f.tenant, deferred.ID.String())
	require.Equal(t, 1, code)
	require.Contains(t, out, "outbox row is not deferred")
	require.Regexp(t, `msg=audit .* attempt=`+deferred.ID.String()+` action=release from=dispatch_pending to=dispatch_pending result=refused reason=".+"`, stderr)
	_, again := f.state(t, deferred.ID)
	require.Equal(t, after, again)

	code, _, stderr = runCmd(t, db.URL, "", "attempts", "release", "--tenant", f.tenant, "--all")
	require.Equal(t, 2, code, stderr)
	require.Contains(t, stderr, "unknown flag: --all")
}

func TestAttemptsListPages(t *testing.T) {
	t.Parallel()
	f := newOperatorFixture(t)
	seen := map[string]bool{}
	after := ""
	for pages := 0; ; pages++ {
		require.Less(t, pages, 10)
		args := []string{"attempts", "list", "--tenant", f.tenant, "--limit", "2", "--json"}
		if after != "" {
			args = append(args, "--after", after)
		}
		code, out, stderr := runCmd(t, f.db.URL, "", args...)
		require.Equal(t, 0, code, stderr)
		var page struct {
			Attempts []map[string]any `json:"attempts"`
			Next     string           `json:"next"`
		}
		require.NoError(t, json.Unmarshal([]byte(out), &page))
		require.LessOrEqual(t, len(page.Attempts), 2)
		for _, a := range page.Attempts {
			id := a["id"].(string)
			require.False(t, seen[id], "listed twice: %s", id)
			require.Equal(t, f.tenant, a["tenant_id"])
			seen[id] = true
		}
		if page.Next == "" {
			break
		}
		after = page.Next
	}
	require.Len(t, seen, 7, "every attempt of the tenant, none of another's")

	code, out, _ := runCmd(t, f.db.URL, "", "attempts", "list", "--tenant", f.tenant, "--state", "failed,succeeded")
	require.Equal(t, 0, code)
	require.Contains(t, out, f.failed.ID.String())
	require.Contains(t, out, f.succeeded.ID.String())
	require.NotContains(t, out, f.running.ID.String())
}

func TestOutboxStatsAndStuck(t *testing.T) {
	t.Parallel()
	f := newOperatorFixture(t)
	ctx := context.Background()
	code, out, stderr := runCmd(t, f.db.URL, "", "outbox", "stats", "--tenant", f.tenant, "--json")
	require.Equal(t, 0, code, stderr)
	var rep struct {
		States []struct {
			Name    string `json:"name"`
			N       int64  `json:"n"`
			AtLeast bool   `json:"at_least"`
		} `json:"attempts_by_state"`
		Due []struct {
			Name string `json:"name"`
			N    int64  `json:"n"`
		} `json:"outbox_due_by_status"`
		OldestDueAt *string `json:"oldest_due_at"`
	}
	require.NoError(t, json.Unmarshal([]byte(out), &rep), out)
	require.Len(t, rep.States, len(kfstype.RunStates()))
	for _, c := range rep.States {
		var want int64
		require.NoError(t, f.db.Pool.QueryRow(ctx, `SELECT count(*) FROM document_compilation_attempts WHERE tenant_id = $1 AND run_state = $2`,
			f.tenant, c.Name).Scan(&want))
		require.Equal(t, want, c.N, c.Name)
		require.False(t, c.AtLeast)
	}
	require.NotNil(t, rep.OldestDueAt, "pending rows are due")

	// Capped: three pending rows counted with --cap 2 show as ≥ 2.
	code, out, _ = runCmd(t, f.db.URL, "", "outbox", "stats", "--tenant", f.tenant, "--cap", "2")
	require.Equal(t, 0, code)
	require.Regexp(t, `dispatch_pending\s+≥ 2`, out)

	// A lease that expired: stuck, with the reason in words.
	_, err := f.db.Pool.Exec(ctx, `UPDATE document_compilation_attempts SET lease_expires_at = now() - interval '1 minute' WHERE id = $1`, f.running.ID)
	require.NoError(t, err)
	_, err = f.db.Pool.Exec(ctx, `UPDATE document_compilation_outbox SET available_at = now() - interval '1 minute' WHERE attempt_id = $1`, f.running.ID)
	require.NoError(t, err)
	code, out, stderr = runCmd(t, f.db.URL, "", "stuck", "--tenant", f.tenant, "--json")
	require.Equal(t, 0, code, stderr)
	var stuck []struct {
		Reason      string         `json:"reason"`
		Description string         `json:"description"`
		Attempt     map[string]any `json:"attempt"`
	}
	require.NoError(t, json.Unmarshal([]byte(out), &stuck), out)
	found := false
	for _, s := range stuck {
		require.Equal(t, f.tenant, s.Attempt["tenant_id"])
		if s.Attempt["id"] == f.running.ID.String() {
			found = true
			require.Equal(t, string(repo.StuckLeaseExpired), s.Reason)
			require.NotEmpty(t, s.Description)
		}
	}
	require.True(t, found, out)
	code, out, _ = runCmd(t, f.db.URL, "", "stuck", "--tenant", "ops-nobody")
	require.Equal(t, 0, code)
	require.Equal(t, "nothing stuck\n", out)
}

// TestAttemptsBulkAll: --all acts on every match of the selection, as
// the console's bulk actions (the same ops.PlanBulk and ops.RunBulk): a
// dry run that counts, a bound refused before any change, a confirmation,
// batches audited one line per attempt and one for the whole, another
// tenant never touched. Mutations: bulkAction skipping the confirmation
// fails "no"; the summary audit line removed fails its regexp; PlanBulk
// bound raised fails --max.
func TestAttemptsBulkAll(t *testing.T) {
	t.Parallel()
	f := newOperatorFixture(t)
	all := []*kfstype.Attempt{f.queued, f.running, f.failed, f.succeeded, f.pendingA, f.pendingB, f.pendingC}
	versions := func() map[uuid.UUID]int32 {
		m := map[uuid.UUID]int32{}
		for _, a := range append(all, f.other) {
			_, m[a.ID] = f.state(t, a.ID)
		}
		return m
	}
	before := versions()

	code, out, stderr := runCmd(t, f.db.URL, "", "attempts", "cancel", "--tenant", f.tenant, "--all", "--dry-run")
	require.Equal(t, 0, code, stderr)
	require.Contains(t, out, `7 attempts match tenant="`+f.tenant+`" state=any: cancel would change 5 (3 dispatch_pending, 1 queued, 1 running) to canceled and leave 2 as they are (1 succeeded, 1 failed)`)
	require.Contains(t, out, "the first 7:")
	code, out, stderr = runCmd(t, f.db.URL, "", "attempts", "cancel", "--tenant", f.tenant, "--all", "--dry-run", "--json")
	require.Equal(t, 0, code, stderr)
	var dry struct {
		Matched     int            `json:"matched"`
		WouldChange int            `json:"would_change"`
		Unchanged   map[string]int `json:"unchanged_by_state"`
		Sample      []ops.Result   `json:"sample"`
	}
	require.NoError(t, json.Unmarshal([]byte(out), &dry), out)
	require.Equal(t, 7, dry.Matched)
	require.Equal(t, 5, dry.WouldChange)
	require.Equal(t, map[string]int{"succeeded": 1, "failed": 1}, dry.Unchanged)
	require.Len(t, dry.Sample, 7)
	code, _, stderr = runCmd(t, f.db.URL, "", "attempts", "cancel", "--tenant", f.tenant, "--all", "--max", "6", "--yes")
	require.Equal(t, 1, code)
	require.Contains(t, stderr, "more than 6 attempts match")
	code, out, _ = runCmd(t, f.db.URL, "no\n", "attempts", "cancel", "--tenant", f.tenant, "--all", "--state", "dispatch_pending,queued")
	require.Equal(t, 1, code)
	require.Contains(t, out, "cancel 4 attempts? Type yes to go on:")
	require.Equal(t, before, versions(), "a dry run, a refused bound and a no change nothing")

	code, out, stderr = runCmd(t, f.db.URL, "yes\n", "attempts", "cancel", "--tenant", f.tenant, "--all", "--state", "dispatch_pending,queued",
		"--batch", "3", "--reason", "bulk from the CLI")
	require.Equal(t, 0, code, stderr)
	require.Contains(t, out, "cancel: 4 applied, 0 skipped (changed since the dry run), 0 not reached, of 4")
	for _, a := range []*kfstype.Attempt{f.queued, f.pendingA, f.pendingB, f.pendingC} {
		st, _ := f.state(t, a.ID)
		require.Equal(t, kfstype.RunStateCanceled, st)
		require.Regexp(t, `msg=audit .* tenant=`+f.tenant+` attempt=`+a.ID.String()+` action=cancel from=\w+ to=canceled result=applied reason="" operator_reason="bulk from the CLI" db_role=\S+ detail="bulk batch [12]"`, stderr)
	}
	require.Regexp(t, `msg=audit .* tenant=`+f.tenant+` attempt="" action=bulk-cancel from="" to="" result=applied reason="" operator_reason="bulk from the CLI" db_role=\S+ detail="filter tenant=\\"`+
		f.tenant+`\\" state=dispatch_pending,queued; matched 4, confirmed 4: applied 4, skipped 0, not reached 0; 2 batches"`, stderr)
	st, v := f.state(t, f.other.ID)
	require.Equal(t, kfstype.RunStateDispatchPending, st)
	require.Equal(t, before[f.other.ID], v, "another tenant's attempt is untouched")

	code, out, stderr = runCmd(t, f.db.URL, "", "attempts", "retry", "--tenant", f.tenant, "--all", "--error-code", kfstype.ErrorCodeCompilationFailed, "--yes", "--json")
	require.Equal(t, 0, code, stderr)
	var rs []ops.Result
	require.NoError(t, json.Unmarshal([]byte(out), &rs), out)
	require.Len(t, rs, 1)
	require.Equal(t, f.failed.ID, rs[0].AttemptID)
	require.Equal(t, ops.OutcomeApplied, rs[0].Outcome)

	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--all", f.pendingA.ID.String()}, "not both"},
		{[]string{"--all", "--after", "l." + f.pendingA.ID.String()}, "--after and --limit are for one page"},
		{[]string{"--all", "--limit", "5"}, "--after and --limit are for one page"},
		{[]string{"--state", "failed", "--max", "5"}, "--max and --batch are for --all"},
		{[]string{"--all", "--max", "0"}, "--max must be 1.."},
		{[]string{"--all", "--older-than", "-1h"}, "must not be negative"},
	} {
		code, _, stderr := runCmd(t, f.db.URL, "", append([]string{"attempts", "cancel", "--tenant", f.tenant}, tc.args...)...)
		require.Equal(t, 2, code, "%q: %s", tc.args, stderr)
		require.Contains(t, stderr, tc.want, "%q", tc.args)
	}
}
