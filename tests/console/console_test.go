package console_test

import (
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/chromedp/chromedp"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/knowledgefs/kfsdb/cmd/kfsdb/console"
	"github.com/knowledgefs/kfsdb/cmd/kfsdb/ops"
	"github.com/knowledgefs/kfsdb/kfstype"
	"github.com/knowledgefs/kfsdb/repo"
	"github.com/knowledgefs/kfsdb/tests/testfactory"
)

// TestConsoleInBrowser walks the console's pages in Chromium, one subtest
// per thing a person does, on one workload and one browser.
func TestConsoleInBrowser(t *testing.T) {
	b := setup(t)
	t.Run("OverviewNumbersEqualSQLCounts", b.overview)
	t.Run("FiltersAndPages", b.filtersAndPages)
	t.Run("CancelThroughButtonAndConfirmation", b.cancel)
	t.Run("ReadOnlyShowsNoActionAndRefusesPosts", b.readOnly)
	t.Run("TokenConsoleRefusesWithoutToken", b.token)
	t.Run("OneTimeLinkLogsInOnce", b.oneTimeLink)
	t.Run("BulkCancelThroughDryRunAndConfirmation", b.bulkCancel)
	t.Run("TenantLimitsRatePauseResume", b.tenantLimits)
}

func css(s string) chromedp.CSS { return chromedp.CSS(s) }

func (b *testBundle) overview(t *testing.T) {
	base := b.start(t, console.Config{})
	tab := b.tab(t)
	b.login(t, tab, base)
	// The ended total covers the last 15 whole minutes by the server's
	// clock: counted before and after the page, so a minute boundary
	// between the two reads cannot fail the test, only shift the window.
	const ended = `SELECT count(*) FROM document_compilation_attempts
		WHERE completed_at >= date_trunc('minute', now()) - interval '14 minutes'`
	endedBefore := b.sqlInt(t, ended)
	do(t, tab, chromedp.Navigate(base+"/"), chromedp.WaitVisible(css("#states")))
	endedAfter := b.sqlInt(t, ended)
	for _, st := range kfstype.RunStates() {
		want := b.sqlInt(t, `SELECT count(*) FROM document_compilation_attempts WHERE run_state = $1`, st)
		require.Equal(t, fmt.Sprint(want), text(t, tab, fmt.Sprintf(`td[data-state="%s"]`, st)), "state %s", st)
	}
	require.Equal(t, fmt.Sprint(b.sqlInt(t, `SELECT count(*) FROM document_compilation_outbox WHERE status = 'pending' AND available_at <= now()`)),
		text(t, tab, `td[data-status="pending"]`))
	require.Contains(t, []string{fmt.Sprint(endedBefore), fmt.Sprint(endedAfter)}, text(t, tab, `#ended-total`))
	b.screenshot(t, tab, "overview")

	confined := b.start(t, console.Config{TenantID: tenants[0]})
	b.login(t, tab, confined)
	require.Equal(t, fmt.Sprint(b.sqlInt(t, `SELECT count(*) FROM document_compilation_attempts WHERE run_state = 'running' AND tenant_id = $1`, tenants[0])),
		text(t, tab, `td[data-state="running"]`))
	b.screenshot(t, tab, "overview-confined")
}

// listedIDs reads the attempt ids of the list page shown.
const listedIDs = `Array.from(document.querySelectorAll('#attempts a.mono')).map(a => a.textContent)`

func (b *testBundle) filtersAndPages(t *testing.T) {
	base := b.start(t, console.Config{PageSize: 4})
	tab := b.tab(t)
	b.login(t, tab, base)
	tenant := tenants[1]
	do(t, tab, chromedp.Navigate(base+"/attempts"),
		chromedp.SendKeys(css(`input[name="tenant"]`), tenant),
		chromedp.Click(css(`input[name="state"][value="succeeded"]`)),
		chromedp.Click(css(`input[name="state"][value="failed"]`)),
		chromedp.Click(css(`.filters button`)),
		chromedp.WaitVisible(css(`#attempts`)))
	b.screenshot(t, tab, "attempts")
	var got []string
	for page := 0; ; page++ {
		require.Less(t, page, 20)
		got = append(got, eval[[]string](t, tab, listedIDs)...)
		if !eval[bool](t, tab, `document.querySelector('#next') !== null`) {
			break
		}
		do(t, tab, chromedp.Click(css(`#next`)), chromedp.WaitVisible(css(`#attempts`)))
	}
	rows, err := b.db.Pool.Query(b.ctx, `SELECT id::text FROM document_compilation_attempts
		WHERE tenant_id = $1 AND run_state IN ('succeeded', 'failed') ORDER BY completed_at DESC, id DESC`, tenant)
	require.NoError(t, err)
	want, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	require.Greater(t, len(want), 8, "more than two pages")
	require.Equal(t, want, got)
	b.screenshot(t, tab, "attempts-last-page")
}

func (b *testBundle) cancel(t *testing.T) {
	base := b.start(t, console.Config{})
	tab := b.tab(t)
	b.login(t, tab, base)
	tenant := tenants[2]
	a := b.first(t, tenant, kfstype.RunStateRunning)
	do(t, tab, chromedp.Navigate(fmt.Sprintf("%s/attempts/%s?tenant=%s", base, a.ID, tenant)), chromedp.WaitVisible(css("#run-state")))
	require.Equal(t, "running", text(t, tab, "#run-state"))
	b.screenshot(t, tab, "attempt-running")
	do(t, tab, chromedp.Click(css(`button.cancel`)), chromedp.WaitVisible(css(`#confirm`)),
		chromedp.SendKeys(css(`input[name="reason"]`), "stuck on a bad document"))
	b.screenshot(t, tab, "confirm-cancel")
	do(t, tab, chromedp.Click(css(`#confirm`)), chromedp.WaitVisible(css(`h1`)))
	require.Equal(t, "cancel applied", text(t, tab, ".flash"))
	require.Equal(t, "canceled", text(t, tab, "#run-state"))
	b.screenshot(t, tab, "attempt-canceled")
	after, err := b.repo.GetAttempt(b.ctx, b.db.Pool, &repo.GetAttemptParams{TenantID: tenant, AttemptID: a.ID})
	require.NoError(t, err)
	require.Equal(t, kfstype.RunStateCanceled, after.RunState)
	require.Zero(t, eval[int](t, tab, `document.querySelectorAll('.actions button').length`), "an ended attempt offers no cancel or supersede")
}

func (b *testBundle) readOnly(t *testing.T) {
	base := b.start(t, console.Config{ReadOnly: true})
	tab := b.tab(t)
	b.login(t, tab, base)
	a := b.first(t, tenants[0], kfstype.RunStateFailed)
	do(t, tab, chromedp.Navigate(fmt.Sprintf("%s/attempts/%s?tenant=%s", base, a.ID, tenants[0])), chromedp.WaitVisible(css(`#run-state`)))
	require.Zero(t, eval[int](t, tab, `document.querySelectorAll('form[action$="/confirm"], button.cancel, button.retry, button.supersede').length`))
	require.Contains(t, text(t, tab, ".scope"), "read-only")
	b.screenshot(t, tab, "attempt-read-only")
	do(t, tab, chromedp.Navigate(fmt.Sprintf("%s/attempts/%s/confirm?action=retry&tenant=%s", base, a.ID, tenants[0])))
	require.Equal(t, "403", text(t, tab, "h1"))
	req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, base+"/attempts/"+a.ID.String()+"/act",
		strings.NewReader(url.Values{"action": {"retry"}, "tenant": {tenants[0]}, "version": {"0"}}.Encode()))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Origin", base)
	res, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	res.Body.Close()
	require.Equal(t, http.StatusForbidden, res.StatusCode)
}

// token: a console answers nothing without a login, in the browser or
// not, and lets a person log in with its token; logging out ends the
// session.
func (b *testBundle) token(t *testing.T) {
	base := b.start(t, console.Config{AuthToken: token})
	res, err := http.Get(base + "/attempts?tenant=" + tenants[0])
	require.NoError(t, err)
	res.Body.Close()
	require.Equal(t, http.StatusUnauthorized, res.StatusCode)

	tab := b.tab(t)
	do(t, tab, chromedp.Navigate(base+"/"))
	require.Equal(t, "401", text(t, tab, "h1"))
	b.screenshot(t, tab, "token-refused")
	do(t, tab, chromedp.Navigate(base+"/login"), chromedp.WaitVisible(css(`input[name="token"]`)),
		chromedp.SendKeys(css(`input[name="token"]`), "wrong"), chromedp.Submit(css(`form.login`)),
		chromedp.WaitVisible(css(`p.error`)))
	b.screenshot(t, tab, "login-wrong")
	do(t, tab, chromedp.SendKeys(css(`input[name="token"]`), token), chromedp.Submit(css(`form.login`)),
		chromedp.WaitVisible(css(`#states`)))
	require.Equal(t, "Overview", text(t, tab, "h1"))
	location, err := chromedp.Run(tab, chromedp.Location())
	require.NoError(t, err)
	require.False(t, strings.Contains(location, token), "the token is not left in the address bar")
	b.screenshot(t, tab, "logged-in")
	do(t, tab, chromedp.Click(css(`form.logout button`)), chromedp.WaitVisible(css(`form.login`)))
	do(t, tab, chromedp.Navigate(base+"/"))
	require.Equal(t, "401", text(t, tab, "h1"), "logged out")
}

// oneTimeLink: a console started without a token makes its own and gives
// a link (printed by `kfsdb console`) that logs a person in once.
func (b *testBundle) oneTimeLink(t *testing.T) {
	srv, base := b.startServer(t, console.Config{})
	link := srv.LoginLink()
	require.NotEmpty(t, link)
	tab := b.tab(t)
	do(t, tab, chromedp.Navigate(base+link), chromedp.WaitVisible(css(`#login-once`)))
	b.screenshot(t, tab, "login-once")
	do(t, tab, chromedp.Click(css(`#login-once`)), chromedp.WaitVisible(css(`#states`)))
	require.Empty(t, srv.LoginLink(), "used")
	other := b.tab(t)
	do(t, other, chromedp.Navigate(base+link), chromedp.WaitVisible(css(`#login-once`)),
		chromedp.Click(css(`#login-once`)), chromedp.WaitVisible(css(`p.error`)))
	b.screenshot(t, other, "login-once-used")
}

// bulkCancel: a person filters a tenant's live attempts, asks to cancel
// every match, reads the dry run (the count, a sample), confirms with a
// reason, and reads the result: one attempt that a relay dispatched
// between the dry run and the confirmation (still live: it still
// matches) is reported as skipped and left queued. Mutation: ops.Apply
// without the dry run's row version cancels it and fails the skip count.
func (b *testBundle) bulkCancel(t *testing.T) {
	base := b.start(t, console.Config{BulkBatchSize: 2})
	tab := b.tab(t)
	b.login(t, tab, base)
	tenant := tenants[0]
	liveStates := []kfstype.RunState{kfstype.RunStateDispatchPending, kfstype.RunStateQueued, kfstype.RunStateRunning, kfstype.RunStateRetryWait}
	// One more, started now by the database's clock, so that a relay can
	// take it (the workload's rows may still be under a relay lock).
	drv := &testfactory.Driver{Repo: b.repo, DB: b.db.Pool}
	pending := drv.Start(b.ctx, t, testfactory.NewScope(b.ctx, t, b.db.Pool, &testfactory.ScopeOpts{TenantID: &tenant}), nil)
	rows, err := b.db.Pool.Query(b.ctx, `SELECT id::text FROM document_compilation_attempts
		WHERE tenant_id = $1 AND completed_at IS NULL ORDER BY id DESC`, tenant)
	require.NoError(t, err)
	live, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	require.Greater(t, len(live), 2)

	steps := []chromedp.Action[chromedp.Void]{chromedp.Navigate(base + "/attempts"), chromedp.SendKeys(css(`input[name="tenant"]`), tenant)}
	for _, st := range liveStates {
		steps = append(steps, chromedp.Click(css(fmt.Sprintf(`input[name="state"][value="%s"]`, st))))
	}
	steps = append(steps, chromedp.Click(css(`.filters button`)), chromedp.WaitVisible(css(`#bulk`)))
	do(t, tab, steps...)
	require.Equal(t, live, eval[[]string](t, tab, listedIDs))
	b.screenshot(t, tab, "bulk-filtered")

	do(t, tab, chromedp.Click(css(`#bulk-cancel`)), chromedp.WaitVisible(css(`#plan-summary`)))
	require.Equal(t, fmt.Sprint(len(live)), text(t, tab, "#matched"))
	require.Equal(t, fmt.Sprint(len(live)), text(t, tab, "#would-change"))
	require.Equal(t, len(live), eval[int](t, tab, `document.querySelectorAll('#sample tbody tr').length`))
	b.screenshot(t, tab, "bulk-dry-run")

	// A relay dispatches one of them before the person confirms.
	drv.Dispatch(b.ctx, t, pending.ID, nil)
	do(t, tab, chromedp.SendKeys(css(`input[name="reason"]`), "uploads from the broken importer"),
		chromedp.Click(css(`#confirm-bulk`)), chromedp.WaitVisible(css(`#result-summary`)))
	require.Equal(t, fmt.Sprint(len(live)-1), text(t, tab, "#applied"))
	require.Equal(t, "1", text(t, tab, "#skipped"))
	require.Equal(t, "0", text(t, tab, "#not-reached"))
	require.Contains(t, text(t, tab, "#skips"), pending.ID.String())
	b.screenshot(t, tab, "bulk-result")

	for _, id := range live {
		var st string
		var msg *string
		require.NoError(t, b.db.Pool.QueryRow(b.ctx, `SELECT run_state, last_error_message FROM document_compilation_attempts WHERE id = $1`, id).Scan(&st, &msg))
		if id == pending.ID.String() {
			require.Equal(t, "queued", st, "the attempt dispatched after the dry run is left as it is")
			continue
		}
		require.Equal(t, "canceled", st, id)
		require.Equal(t, "uploads from the broken importer", *msg)
	}
	do(t, tab, chromedp.Click(css(`#back`)), chromedp.WaitVisible(css(`#attempts`)))
	require.Equal(t, []string{pending.ID.String()}, eval[[]string](t, tab, listedIDs), "only the skipped attempt is still live")
}

// tenantLimits: a person opens a tenant's limits from its attempts list,
// sets a rate and a cap, pauses it with a reason, sees it paused in the
// list of limited tenants, and resumes it; each step is what the
// database holds. Mutation: ops.ChangeTenantLimits dropping the pause's
// reason fails #paused's text.
func (b *testBundle) tenantLimits(t *testing.T) {
	base := b.start(t, console.Config{})
	tab := b.tab(t)
	b.login(t, tab, base)
	tenant := tenants[1]
	limits := func() *repo.TenantLimit {
		l, err := ops.TenantLimits(b.ctx, b.repo, b.db.Pool, tenant)
		require.NoError(t, err)
		return l
	}
	do(t, tab, chromedp.Navigate(base+"/attempts?tenant="+tenant), chromedp.Click(css(`#tenant-limits`)), chromedp.WaitVisible(css(`#limits`)))
	require.Equal(t, "none", text(t, tab, "#summary"))
	do(t, tab, chromedp.SendKeys(css(`#set-form input[name="rate"]`), "2.5"), chromedp.SendKeys(css(`#set-form input[name="burst"]`), "5"),
		chromedp.SendKeys(css(`#set-form input[name="max_running"]`), "4"), chromedp.SendKeys(css(`#set-form input[name="reason"]`), "a noisy importer"),
		chromedp.Click(css(`#set`)), chromedp.WaitVisible(css(`.flash`)))
	require.Equal(t, "tenant-set-limit applied", text(t, tab, ".flash"))
	require.Contains(t, text(t, tab, "#rate"), "2.5 leases/s, burst 5")
	l := limits()
	require.Equal(t, 2.5, l.Rate)
	require.Equal(t, int32(5), l.Burst)
	require.Equal(t, int32(4), l.MaxRunning)

	do(t, tab, chromedp.SendKeys(css(`#pause-form input[name="reason"]`), "reindexing its spaces"), chromedp.Click(css(`#pause`)),
		chromedp.WaitVisible(css(`#resume`)))
	require.Equal(t, "tenant-pause applied", text(t, tab, ".flash"))
	require.Contains(t, text(t, tab, "#paused"), "reindexing its spaces")
	require.True(t, limits().Paused())
	b.screenshot(t, tab, "tenant-paused")

	do(t, tab, chromedp.Navigate(base+"/tenant"), chromedp.WaitVisible(css(`#limited`)))
	require.Contains(t, text(t, tab, "#limited"), tenant)
	require.Contains(t, text(t, tab, "#limited"), "reindexing its spaces")
	b.screenshot(t, tab, "tenants-limited")

	do(t, tab, chromedp.Click(css(fmt.Sprintf(`a[href="/tenant?tenant=%s"]`, tenant))), chromedp.WaitVisible(css(`#resume`)),
		chromedp.Click(css(`#resume`)), chromedp.WaitVisible(css(`#pause`)))
	require.Equal(t, "tenant-resume applied", text(t, tab, ".flash"))
	require.False(t, limits().Paused())
	require.Equal(t, 2.5, limits().Rate, "resuming keeps the rate")
	b.screenshot(t, tab, "tenant-resumed")
}
