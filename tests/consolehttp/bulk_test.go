package consolehttp_test

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/knowledgefs/kfsdb/cmd/kfsdb/console"
	"github.com/knowledgefs/kfsdb/cmd/kfsdb/ops"
	"github.com/knowledgefs/kfsdb/kfstype"
	"github.com/knowledgefs/kfsdb/repo"
	"github.com/knowledgefs/kfsdb/tests/consolepage"
	"github.com/knowledgefs/kfsdb/tests/testfactory"
)

// The live states, as a bulk cancel's filter names them.
const liveStates = "&state=dispatch_pending&state=queued&state=running&state=retry_wait"

// bulkForm reads a dry run page's confirmation form: its hidden fields.
func bulkForm(t *testing.T, page string) url.Values {
	t.Helper()
	form, ok := consolepage.PostForm(page, "/bulk")
	require.True(t, ok, "no confirmation form in:\n%s", page)
	return form
}

// number reads the number shown in the element with id.
func number(t *testing.T, page, id string) int {
	t.Helper()
	n, err := consolepage.Number(page, id)
	require.NoError(t, err, page)
	return n
}

// ids are the ids of tenant's attempts in states, from SQL.
func (b *testBundle) ids(t *testing.T, tenant string, states ...kfstype.RunState) []uuid.UUID {
	t.Helper()
	names := make([]string, len(states))
	for i, s := range states {
		names[i] = string(s)
	}
	rows, err := b.db.Pool.Query(b.ctx, `SELECT id FROM document_compilation_attempts WHERE tenant_id = $1 AND run_state = ANY($2) ORDER BY id`, tenant, names)
	require.NoError(t, err)
	out, err := pgx.CollectRows(rows, pgx.RowTo[uuid.UUID])
	require.NoError(t, err)
	return out
}

// snapshot is every attempt and outbox row of tenant as text: what a
// refused or read-only request must leave alone.
func (b *testBundle) snapshot(t *testing.T, tenant string) string {
	t.Helper()
	var s string
	require.NoError(t, b.db.Pool.QueryRow(b.ctx, `SELECT
		coalesce((SELECT string_agg(a::text, E'\n' ORDER BY a.id) FROM document_compilation_attempts a WHERE a.tenant_id = $1), '') || E'\n' ||
		coalesce((SELECT string_agg(o::text, E'\n' ORDER BY o.id) FROM document_compilation_outbox o
		  JOIN document_compilation_attempts a ON a.id = o.attempt_id WHERE a.tenant_id = $1), '')`, tenant).Scan(&s))
	return s
}

func (b *testBundle) attemptOf(t *testing.T, tenant string, id uuid.UUID) *kfstype.Attempt {
	t.Helper()
	a, err := b.drv.Repo.GetAttempt(b.ctx, b.db.Pool, &repo.GetAttemptParams{TenantID: tenant, AttemptID: id})
	require.NoError(t, err)
	return a
}

// TestBulkDryRunCountsAndChangesNothing: a dry run's counts equal SQL's
// for the filter (states, error code, age), its sample is the first
// matches, more than BulkMax matches is refused with a message, and
// nothing changes. Mutations: PlanBulk counting only the attempts the
// action applies to as matched fails "would-stay"; Filter.Params leaving
// out the error code fails the unknown code's "none"; the bound checked
// as >= BulkMax+5 fails "too-many".
func TestBulkDryRunCountsAndChangesNothing(t *testing.T) {
	b := setup(t)
	base := b.start(t, console.Config{})
	before := b.snapshot(t, tenantA)

	all := b.ids(t, tenantA, kfstype.RunStates()...)
	live := b.ids(t, tenantA, kfstype.RunStateDispatchPending, kfstype.RunStateQueued, kfstype.RunStateRunning, kfstype.RunStateRetryWait)
	page := get(t, base+"/bulk?action=cancel&tenant="+tenantA)
	require.Equal(t, http.StatusOK, page.status, page.body)
	require.Equal(t, len(all), number(t, page.body, "matched"))
	require.Equal(t, len(live), number(t, page.body, "would-change"))
	require.Equal(t, len(all)-len(live), number(t, page.body, "would-stay"))
	require.Equal(t, min(len(all), 20), strings.Count(page.body[strings.Index(page.body, `id="sample"`):], `<tr><td class="mono">`))
	require.Equal(t, strconv.Itoa(len(live)), bulkForm(t, page.body).Get("count"))

	failed := b.ids(t, tenantA, kfstype.RunStateFailed)
	require.NotEmpty(t, failed)
	page = get(t, base+"/bulk?action=retry&tenant="+tenantA+"&state=failed&error="+kfstype.ErrorCodeCompilationFailed+"&newer=1h")
	require.Equal(t, len(failed), number(t, page.body, "matched"))
	require.Equal(t, len(failed), number(t, page.body, "would-change"))
	require.Contains(t, page.body, `Yes, retry `+strconv.Itoa(len(failed))+` attempts`)
	for name, query := range map[string]string{
		"UnknownCode":  "&state=failed&error=NO_SUCH_CODE",
		"OlderThanAll": "&older=1h", // the workload is minutes old
	} {
		page := get(t, base+"/bulk?action=retry&tenant="+tenantA+query)
		require.Equal(t, http.StatusOK, page.status, name)
		require.Contains(t, page.body, `id="none"`, name)
		require.NotContains(t, page.body, `action="/bulk"`, name)
	}

	tight := b.start(t, console.Config{BulkMax: len(live) - 1})
	page = get(t, tight+"/bulk?action=cancel&tenant="+tenantA+liveStates)
	require.Equal(t, http.StatusOK, page.status)
	require.Contains(t, page.body, `id="too-many"`)
	require.Contains(t, page.body, fmt.Sprintf("More than %d attempts match this filter", len(live)-1))
	require.NotContains(t, page.body, `action="/bulk"`)
	page = get(t, b.start(t, console.Config{BulkMax: len(live)})+"/bulk?action=cancel&tenant="+tenantA+liveStates)
	require.Equal(t, len(live), number(t, page.body, "would-change"), "exactly BulkMax matches is allowed")

	for name, tc := range map[string]struct {
		path   string
		status int
	}{
		"UnknownAction": {"/bulk?action=explode&tenant=" + tenantA, http.StatusBadRequest},
		"NoTenant":      {"/bulk?action=cancel", http.StatusBadRequest},
		"BadAge":        {"/bulk?action=cancel&tenant=" + tenantA + "&older=soon", http.StatusBadRequest},
		"BadState":      {"/bulk?action=cancel&tenant=" + tenantA + "&state=bogus", http.StatusBadRequest},
		"LongCode":      {"/bulk?action=cancel&tenant=" + tenantA + "&error=" + strings.Repeat("E", 65), http.StatusBadRequest},
	} {
		require.Equal(t, tc.status, get(t, base+tc.path).status, name)
	}
	require.Equal(t, before, b.snapshot(t, tenantA), "a dry run changes nothing")
}

// TestBulkCancelInBatchesIsAudited cancels every live attempt of a
// tenant as the buttons do, in batches of 2: the result page's counts,
// the database, one audit line per attempt with its batch and one for
// the whole, and a second POST of the same form refused. Mutations: the
// OnBatch audit removed fails the per-attempt audit lines; bulkStore.take
// accepting a dry run that ran fails the replay's 409.
func TestBulkCancelInBatchesIsAudited(t *testing.T) {
	b := setup(t)
	var audit testfactory.SyncBuffer
	base := b.start(t, console.Config{BulkBatchSize: 2, AuditLogger: slog.New(slog.NewTextHandler(&audit, nil))})
	otherBefore := b.snapshot(t, tenantA)
	live := b.ids(t, tenantB, kfstype.RunStateDispatchPending, kfstype.RunStateQueued, kfstype.RunStateRunning, kfstype.RunStateRetryWait)
	require.Greater(t, len(live), 2, "more than one batch")

	list := get(t, base+"/attempts?tenant="+tenantB+liveStates)
	require.Contains(t, list.body, `id="bulk-cancel"`)
	page := get(t, base+"/bulk?action=cancel&tenant="+tenantB+liveStates)
	form := bulkForm(t, page.body)
	form.Set("reason", "bulk test\nsecond line")
	res := do(t, http.MethodPost, base+"/bulk", form, nil)
	require.Equal(t, http.StatusSeeOther, res.status, res.body)
	loc := res.header.Get("Location")
	require.Equal(t, "/bulk/"+form.Get("plan"), loc)
	result := get(t, base+loc)
	require.Equal(t, http.StatusOK, result.status)
	require.Equal(t, len(live), number(t, result.body, "applied"))
	require.Equal(t, 0, number(t, result.body, "skipped"))
	require.Equal(t, 0, number(t, result.body, "not-reached"))
	require.Equal(t, len(live), number(t, result.body, "confirmed"))
	for _, id := range live {
		a := b.attemptOf(t, tenantB, id)
		require.Equal(t, kfstype.RunStateCanceled, a.RunState)
		require.Equal(t, "bulk test\nsecond line", *a.LastErrorMessage, "the reason is stored with each")
		testfactory.RequireInvariants(b.ctx, t, b.db.Pool, id)
	}
	require.Equal(t, otherBefore, b.snapshot(t, tenantA), "another tenant is untouched")

	lines := strings.Split(strings.TrimSpace(audit.String()), "\n")
	require.Len(t, lines, len(live)+1, audit.String())
	batches := (len(live) + 1) / 2
	for _, id := range live {
		require.Regexp(t, `msg=audit at=\S+ session=bearer remote=\S+ forwarded_claim="" tenant=`+tenantB+` attempt=`+id.String()+
			` action=cancel from=\w+ to=canceled result=applied reason="" operator_reason="bulk test\\\\x0asecond line" db_role="" detail="bulk `+
			form.Get("plan")+` batch [1-9]\d*"`, audit.String())
	}
	require.Regexp(t, `action=bulk-cancel from="" to="" result=applied reason="" operator_reason="bulk test\\\\x0asecond line" db_role="" detail="bulk `+
		form.Get("plan")+`; filter tenant=\\"`+tenantB+`\\" state=dispatch_pending,queued,running,retry_wait; matched `+strconv.Itoa(len(live))+
		`, confirmed `+strconv.Itoa(len(live))+`: applied `+strconv.Itoa(len(live))+`, skipped 0, not reached 0; `+strconv.Itoa(batches)+` batches"`, lines[len(lines)-1])

	// The same form again: refused, audited, nothing run.
	res = do(t, http.MethodPost, base+"/bulk", form, nil)
	require.Equal(t, http.StatusConflict, res.status)
	require.Contains(t, res.body, "already confirmed")
	require.Regexp(t, `action=bulk-cancel .*result=refused reason="this bulk action was already confirmed`, audit.String())
	// The result is the maker's only.
	require.Equal(t, http.StatusNotFound, do(t, http.MethodGet, base+loc, nil, map[string]string{"Cookie": login(t, base, testToken)}).status)
}

// TestBulkConfirmationRefusals: the confirmation is refused without its
// token, for another filter, count, action, tenant or dry run than the
// one confirmed, from another login, cross-origin, and on a read-only
// console (which offers no bulk action at all); none of them changes a
// row, and the untouched form then works once. Mutations: bulkTokenValid
// answering true fails NoCSRF; the filter left out of the token and of
// the dry run check fails OtherFilter and OtherAge; the read-only check
// of GET /bulk removed fails ReadOnlyDryRun.
func TestBulkConfirmationRefusals(t *testing.T) {
	b := setup(t)
	open := b.start(t, console.Config{})
	readOnly := b.start(t, console.Config{ReadOnly: true})
	cookie := login(t, open, testToken)
	before := b.snapshot(t, tenantA)
	const query = "/bulk?action=cancel&tenant=" + tenantA + "&state=dispatch_pending"
	form := bulkForm(t, get(t, open+query).body)
	require.Equal(t, http.StatusForbidden, get(t, readOnly+query).status)

	changed := func(k string, vs ...string) url.Values {
		v := url.Values{}
		for key, val := range form {
			v[key] = append([]string(nil), val...)
		}
		if vs == nil {
			v.Del(k)
		} else {
			v[k] = vs
		}
		return v
	}
	post := func(base string, v url.Values, hdr map[string]string) int {
		return do(t, http.MethodPost, base+"/bulk", v, hdr).status
	}
	n, err := strconv.Atoi(form.Get("count"))
	require.NoError(t, err)
	for name, tc := range map[string]struct{ got, want int }{
		"NoCSRF":          {post(open, changed("csrf"), nil), http.StatusForbidden},
		"OtherFilter":     {post(open, changed("state", "dispatch_pending", "queued"), nil), http.StatusForbidden},
		"OtherAge":        {post(open, changed("older", "1m"), nil), http.StatusForbidden},
		"OtherCount":      {post(open, changed("count", strconv.Itoa(n+1)), nil), http.StatusForbidden},
		"OtherAction":     {post(open, changed("action", "supersede"), nil), http.StatusForbidden},
		"OtherTenant":     {post(open, changed("tenant", tenantB), nil), http.StatusForbidden},
		"OtherDryRun":     {post(open, changed("plan", "another"), nil), http.StatusForbidden},
		"OtherLogin":      {post(open, form, map[string]string{"Cookie": cookie}), http.StatusForbidden},
		"CrossOrigin":     {post(open, form, map[string]string{"Origin": "http://evil.example"}), http.StatusForbidden},
		"ReadOnlyPost":    {post(readOnly, form, nil), http.StatusForbidden},
		"ReadOnlyDryRun":  {get(t, readOnly+query).status, http.StatusForbidden},
		"GetResultOfNone": {get(t, open+"/bulk/"+form.Get("plan")).status, http.StatusNotFound},
	} {
		t.Run(name, func(t *testing.T) { require.Equal(t, tc.want, tc.got) })
	}
	require.Equal(t, before, b.snapshot(t, tenantA), "no refused confirmation changed a row")
	require.NotContains(t, get(t, readOnly+"/attempts?tenant="+tenantA).body, `action="/bulk"`, "read-only offers no bulk action")
	require.Contains(t, get(t, open+"/attempts?tenant="+tenantA).body, `action="/bulk"`)

	require.Equal(t, http.StatusSeeOther, post(open, form, nil), "the form as the dry run made it")
	require.Equal(t, http.StatusConflict, post(open, form, nil), "once")
	for _, id := range b.ids(t, tenantA, kfstype.RunStateDispatchPending) {
		t.Errorf("attempt %s is still dispatch_pending", id)
	}
}

// TestBulkConfinedToItsTenant: a console confined to tenant A cannot
// reach tenant B's attempts by a crafted filter, in the dry run or the
// confirmation. Mutation: filterOf taking ?tenant= over the confined
// tenant fails both 404s and B's snapshot.
func TestBulkConfinedToItsTenant(t *testing.T) {
	b := setup(t)
	var audit testfactory.SyncBuffer
	confined := b.start(t, console.Config{TenantID: tenantA, AuditLogger: slog.New(slog.NewTextHandler(&audit, nil))})
	beforeB := b.snapshot(t, tenantB)
	require.Equal(t, http.StatusNotFound, get(t, confined+"/bulk?action=cancel&tenant="+tenantB).status)
	page := get(t, confined+"/bulk?action=cancel"+liveStates)
	require.Equal(t, http.StatusOK, page.status)
	liveA := b.ids(t, tenantA, kfstype.RunStateDispatchPending, kfstype.RunStateQueued, kfstype.RunStateRunning, kfstype.RunStateRetryWait)
	require.Equal(t, len(liveA), number(t, page.body, "matched"))
	form := bulkForm(t, page.body)
	require.Empty(t, form.Get("tenant"), "a confined console's forms name no tenant")

	crafted := url.Values{}
	for k, v := range form {
		crafted[k] = v
	}
	crafted.Set("tenant", tenantB)
	res := do(t, http.MethodPost, confined+"/bulk", crafted, nil)
	require.Equal(t, http.StatusNotFound, res.status)
	require.Regexp(t, `tenant=`+tenantB+` attempt="" action=bulk-cancel .*result=refused reason="no such tenant in this console"`, audit.String())

	res = do(t, http.MethodPost, confined+"/bulk", form, nil)
	require.Equal(t, http.StatusSeeOther, res.status)
	require.Equal(t, len(liveA), number(t, get(t, confined+res.header.Get("Location")).body, "applied"))
	require.Empty(t, b.ids(t, tenantA, kfstype.RunStateDispatchPending, kfstype.RunStateQueued, kfstype.RunStateRunning, kfstype.RunStateRetryWait))
	require.Equal(t, beforeB, b.snapshot(t, tenantB), "tenant B untouched")
}

// waitForLockWait waits until a backend of the database waits for a row
// lock (the bulk's batch behind the test's open transaction).
func (b *testBundle) waitForLockWait(t *testing.T) {
	t.Helper()
	require.Eventually(t, func() bool {
		var n int
		require.NoError(t, b.db.Pool.QueryRow(b.ctx, `SELECT count(*) FROM pg_stat_activity
			WHERE datname = current_database() AND wait_event_type = 'Lock'`).Scan(&n))
		return n > 0
	}, 30*time.Second, 10*time.Millisecond, "no backend waits for the locked attempt")
}

// TestBulkSkipsWhatChangedSinceTheDryRun: between the dry run and the
// confirmation one attempt is dispatched (still live: it would still
// match), one canceled by someone else, one heartbeats inside a
// transaction the bulk's batch must wait for, and a new one starts.
// The bulk applies the rest, skips the three changed ones with
// stale_row_version (never overwriting them) and does not touch the new
// one. Mutations: ops.Apply without the expected row version cancels the
// dispatched and the heartbeating attempts; RunBulk re-reading the filter
// at confirmation cancels the new one; bulkStore.take not marking the
// dry run running lets a second POST of the form run beside the first.
func TestBulkSkipsWhatChangedSinceTheDryRun(t *testing.T) {
	b := setup(t)
	ctx := b.ctx
	var audit testfactory.SyncBuffer
	base := b.start(t, console.Config{BulkBatchSize: 2, AuditLogger: slog.New(slog.NewTextHandler(&audit, nil))})
	tenant := "console-c"
	scope := func() *testfactory.Scope {
		return testfactory.NewScope(ctx, t, b.db.Pool, &testfactory.ScopeOpts{TenantID: &tenant})
	}
	// Running first: its dispatch claims every due outbox row, which the
	// pending ones' must not be yet.
	running, lease, _ := b.drv.Running(ctx, t, scope(), nil)
	var pending []*kfstype.Attempt
	for range 5 {
		pending = append(pending, b.drv.Start(ctx, t, scope(), nil))
	}

	page := get(t, base+"/bulk?action=cancel&tenant="+tenant+liveStates)
	require.Equal(t, 6, number(t, page.body, "would-change"))
	form := bulkForm(t, page.body)

	b.drv.Dispatch(ctx, t, pending[0].ID, nil)
	_, err := b.drv.Repo.Cancel(ctx, b.db.Pool, &repo.CancelParams{AttemptRef: repo.AttemptRef{TenantID: tenant,
		KnowledgeSpaceID: pending[1].KnowledgeSpaceID, AttemptID: pending[1].ID}, Reason: new("someone else")})
	require.NoError(t, err)
	newcomer := b.drv.Start(ctx, t, scope(), nil)
	tx, err := b.db.Pool.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(context.Background()) }()
	_, err = b.drv.Repo.Heartbeat(ctx, tx, &repo.HeartbeatParams{Lease: lease})
	require.NoError(t, err)

	posted := make(chan response, 1)
	go func() { posted <- do(t, http.MethodPost, base+"/bulk", form, nil) }()
	// The running attempt is the oldest: last in list order, in the
	// last batch, which waits for the transaction.
	b.waitForLockWait(t)
	// The same form again while the first runs: refused at once, not run
	// beside it (bounded wait: run, it would wait for the lock too).
	again := make(chan response, 1)
	go func() { again <- do(t, http.MethodPost, base+"/bulk", form, nil) }()
	select {
	case res := <-again:
		require.Equal(t, http.StatusConflict, res.status, res.body)
	case <-time.After(30 * time.Second):
		t.Fatal("a second confirmation of the same form runs beside the first")
	}
	require.NoError(t, tx.Commit(ctx))
	res := <-posted
	require.Equal(t, http.StatusSeeOther, res.status, res.body)
	result := get(t, base+res.header.Get("Location"))
	require.Equal(t, 3, number(t, result.body, "applied"), result.body)
	require.Equal(t, 3, number(t, result.body, "skipped"))
	require.Contains(t, result.body, `<span class="mono">`+ops.RefusedStale+`</span> 3`)

	require.Equal(t, kfstype.RunStateQueued, b.attemptOf(t, tenant, pending[0].ID).RunState, "dispatched after the dry run: skipped")
	canceled := b.attemptOf(t, tenant, pending[1].ID)
	require.Equal(t, "someone else", *canceled.LastErrorMessage, "someone else's cancel is not overwritten")
	require.Equal(t, kfstype.RunStateRunning, b.attemptOf(t, tenant, running.ID).RunState, "heartbeat after the dry run: skipped")
	require.Equal(t, kfstype.RunStateDispatchPending, b.attemptOf(t, tenant, newcomer.ID).RunState, "started after the dry run: not touched")
	for _, a := range pending[2:] {
		require.Equal(t, kfstype.RunStateCanceled, b.attemptOf(t, tenant, a.ID).RunState)
		testfactory.RequireInvariants(ctx, t, b.db.Pool, a.ID)
	}
	for _, id := range []uuid.UUID{pending[0].ID, pending[1].ID, running.ID} {
		require.Regexp(t, `attempt=`+id.String()+` action=cancel .*result=refused reason=".*changed since it was read`, audit.String())
	}
}

// TestBulkStopsAtItsTimeLimit: a bulk action whose first batch waits
// past BulkTimeout for a lock stops, reports every confirmed attempt as
// not reached, changes none and audits the stop. Mutation: RunBulk
// counting not-reached targets as skipped fails the counts.
func TestBulkStopsAtItsTimeLimit(t *testing.T) {
	b := setup(t)
	ctx := b.ctx
	var audit testfactory.SyncBuffer
	base := b.start(t, console.Config{BulkTimeout: 300 * time.Millisecond, AuditLogger: slog.New(slog.NewTextHandler(&audit, nil))})
	tenant := "console-d"
	scope := func() *testfactory.Scope {
		return testfactory.NewScope(ctx, t, b.db.Pool, &testfactory.ScopeOpts{TenantID: &tenant})
	}
	for range 3 {
		b.drv.Start(ctx, t, scope(), nil)
	}
	newest := b.drv.Start(ctx, t, scope(), nil)
	form := bulkForm(t, get(t, base+"/bulk?action=supersede&tenant="+tenant).body)
	before := b.snapshot(t, tenant)

	tx, err := b.db.Pool.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(context.Background()) }()
	_, err = tx.Exec(ctx, `SELECT 1 FROM document_compilation_attempts WHERE id = $1 FOR UPDATE`, newest.ID)
	require.NoError(t, err)
	res := do(t, http.MethodPost, base+"/bulk", form, nil)
	require.NoError(t, tx.Rollback(ctx))
	require.Equal(t, http.StatusSeeOther, res.status)
	result := get(t, base+res.header.Get("Location"))
	require.Contains(t, result.body, `id="stopped"`)
	require.Equal(t, 0, number(t, result.body, "applied"))
	require.Equal(t, 0, number(t, result.body, "skipped"))
	require.Equal(t, 4, number(t, result.body, "not-reached"))
	require.Equal(t, before, b.snapshot(t, tenant), "nothing changed")
	require.Regexp(t, `action=bulk-supersede .*result=failed reason="the time limit of a bulk action was reached" .*not reached 4; 1 batches"`, audit.String())
	require.NotContains(t, audit.String(), "action=supersede ", "no attempt was acted on")
}
