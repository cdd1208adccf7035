package consolehttp_test

import (
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/knowledgefs/kfsdb/cmd/kfsdb/console"
	"github.com/knowledgefs/kfsdb/kfstype"
	"github.com/knowledgefs/kfsdb/repo"
	"github.com/knowledgefs/kfsdb/tests/testfactory"
)

// TestOverviewNumbersEqualSQLCounts reads the overview's counts off the
// page, confined and not, and compares them with GROUP BY counts.
func TestOverviewNumbersEqualSQLCounts(t *testing.T) {
	b := setup(t)
	// The ended total covers the last 15 whole minutes by the server's
	// clock: counted before and after the page, so a minute boundary in
	// between only shifts the window.
	endedCount := func(tenant string) int {
		var n int
		require.NoError(t, b.db.Pool.QueryRow(b.ctx, `SELECT count(*) FROM document_compilation_attempts
			WHERE ($1 = '' OR tenant_id = $1) AND completed_at >= date_trunc('minute', now()) - interval '14 minutes'`, tenant).Scan(&n))
		return n
	}
	for _, tenant := range []string{"", tenantA} {
		base := b.start(t, console.Config{TenantID: tenant})
		endedBefore := endedCount(tenant)
		page := get(t, base+"/")
		endedAfter := endedCount(tenant)
		require.Equal(t, http.StatusOK, page.status)
		want := map[string]int{}
		rows, err := b.db.Pool.Query(b.ctx, `SELECT run_state, count(*) FROM document_compilation_attempts
			WHERE $1 = '' OR tenant_id = $1 GROUP BY run_state`, tenant)
		require.NoError(t, err)
		for rows.Next() {
			var s string
			var n int
			require.NoError(t, rows.Scan(&s, &n))
			want[s] = n
		}
		require.NoError(t, rows.Err())
		for _, st := range kfstype.RunStates() {
			m := regexp.MustCompile(`data-state="` + string(st) + `">(\d+)<`).FindStringSubmatch(page.body)
			require.NotNil(t, m, "state %s missing", st)
			require.Equal(t, strconv.Itoa(want[string(st)]), m[1], "tenant %q state %s", tenant, st)
		}
		m := regexp.MustCompile(`id="ended-total">(\d+)<`).FindStringSubmatch(page.body)
		require.NotNil(t, m, "ended total missing")
		require.Contains(t, []string{strconv.Itoa(endedBefore), strconv.Itoa(endedAfter)}, m[1])
		require.Equal(t, tenant == "", regexp.MustCompile(`data-status="pending">\d+<`).MatchString(page.body),
			"the all-tenant backlog is shown only unconfined")
	}
}

// TestSecurityRules checks the status code of every security rule.
func TestSecurityRules(t *testing.T) {
	b := setup(t)
	a := b.first(t, tenantA, kfstype.RunStateDispatchPending)
	other := b.first(t, tenantB, kfstype.RunStateDispatchPending)
	open := b.start(t, console.Config{})
	confined := b.start(t, console.Config{TenantID: tenantA})
	readOnly := b.start(t, console.Config{ReadOnly: true})
	attemptA := fmt.Sprintf("/attempts/%s?tenant=%s", a.ID, tenantA)
	noAuth := map[string]string{"Authorization": ""}
	act := func(base string, form url.Values, hdr map[string]string) int {
		return do(t, http.MethodPost, base+"/attempts/"+a.ID.String()+"/act", form, hdr).status
	}
	csrfOf := func(base, action string) url.Values {
		page := get(t, fmt.Sprintf("%s/attempts/%s/confirm?action=%s&tenant=%s", base, a.ID, action, tenantA))
		require.Equal(t, http.StatusOK, page.status)
		return url.Values{"action": {action}, "tenant": {tenantA}, "version": {hidden(t, page.body, "version")}, "csrf": {hidden(t, page.body, "csrf")}}
	}
	cookie := login(t, open, testToken)
	cancel := csrfOf(open, "cancel")
	otherVersion := url.Values{"action": {"cancel"}, "tenant": {tenantA}, "version": {"999"}, "csrf": cancel["csrf"]}
	for name, tc := range map[string]struct{ got, want int }{
		"NoTokenIs401":            {do(t, "GET", open+"/", nil, noAuth).status, http.StatusUnauthorized},
		"WrongBearerIs401":        {do(t, "GET", open+"/", nil, map[string]string{"Authorization": "Bearer nope"}).status, http.StatusUnauthorized},
		"BearerIs200":             {get(t, open+"/").status, http.StatusOK},
		"LoginCookieIs200":        {do(t, "GET", open+"/attempts", nil, map[string]string{"Cookie": cookie}).status, http.StatusOK},
		"TokenInURLIsNoLogin":     {len(do(t, "GET", open+"/login?token="+testToken, nil, noAuth).header.Values("Set-Cookie")), 0},
		"ForgedCookieIs401":       {do(t, "GET", open+"/", nil, map[string]string{"Cookie": "kfsdb_console=" + testToken}).status, http.StatusUnauthorized},
		"TokenlessPostIs401":      {act(open, cancel, noAuth), http.StatusUnauthorized},
		"PostWithoutCSRFIs403":    {act(open, url.Values{"action": {"cancel"}, "tenant": {tenantA}, "version": cancel["version"]}, nil), http.StatusForbidden},
		"CSRFOfOtherActionIs403":  {act(open, url.Values{"action": {"supersede"}, "tenant": {tenantA}, "version": cancel["version"], "csrf": cancel["csrf"]}, nil), http.StatusForbidden},
		"CSRFOfOtherVersionIs403": {act(open, otherVersion, nil), http.StatusForbidden},
		"CSRFOfOtherSessionIs403": {act(open, cancel, map[string]string{"Cookie": cookie}), http.StatusForbidden},
		"CrossOriginPostIs403":    {act(open, cancel, map[string]string{"Origin": "http://evil.example"}), http.StatusForbidden},
		"NullOriginPostIs403":     {act(open, cancel, map[string]string{"Origin": "null"}), http.StatusForbidden},
		"PostWithoutOriginIs403":  {act(open, cancel, map[string]string{"Origin": ""}), http.StatusForbidden},
		"CrossSiteFetchIs403":     {act(open, cancel, map[string]string{"Origin": "", "Sec-Fetch-Site": "cross-site"}), http.StatusForbidden},
		"GetOnActionRouteIs405":   {get(t, open+"/attempts/"+a.ID.String()+"/act").status, http.StatusMethodNotAllowed},
		"ReadOnlyConfirmIs403":    {get(t, readOnly+"/attempts/"+a.ID.String()+"/confirm?action=cancel&tenant="+tenantA).status, http.StatusForbidden},
		"ReadOnlyPostIs403":       {act(readOnly, cancel, nil), http.StatusForbidden},
		"OtherTenantAttemptIs404": {get(t, confined+"/attempts/"+other.ID.String()).status, http.StatusNotFound},
		"OtherTenantParamIs404":   {get(t, confined+"/attempts/"+other.ID.String()+"?tenant="+tenantB).status, http.StatusNotFound},
		"OtherTenantListIs404":    {get(t, confined+"/attempts?tenant="+tenantB).status, http.StatusNotFound},
		"OwnTenantAttemptIs200":   {get(t, confined+"/attempts/"+a.ID.String()).status, http.StatusOK},
		"UnknownAttemptIs404":     {get(t, open+"/attempts/"+other.ID.String()+"?tenant="+tenantA).status, http.StatusNotFound},
	} {
		t.Run(name, func(t *testing.T) { require.Equal(t, tc.want, tc.got) })
	}
	after, err := b.drv.Repo.GetAttempt(b.ctx, b.db.Pool, &repo.GetAttemptParams{TenantID: tenantA, AttemptID: a.ID})
	require.NoError(t, err)
	require.Equal(t, kfstype.RunStateDispatchPending, after.RunState, "no refused request changed the attempt")

	page := get(t, readOnly+attemptA)
	require.NotContains(t, page.body, "/confirm", "read-only shows no action")
	page = get(t, open+attemptA)
	require.Contains(t, page.body, `name="action" value="cancel"`)
	for k, v := range map[string]string{"Content-Security-Policy": "default-src 'self'", "X-Frame-Options": "DENY", "Cache-Control": "no-store"} {
		require.Contains(t, page.header.Get(k), v)
	}
	require.NotContains(t, page.body, "<script", "no JavaScript")
}

// TestCancelThroughConfirmation cancels an attempt the way the buttons do,
// and checks that a confirmation for a version that changed is refused.
func TestCancelThroughConfirmation(t *testing.T) {
	b := setup(t)
	var audit testfactory.SyncBuffer
	base := b.start(t, console.Config{TenantID: tenantA, AuditLogger: slog.New(slog.NewTextHandler(&audit, nil))})
	a := b.first(t, tenantA, kfstype.RunStateRunning)
	page := get(t, base+"/attempts/"+a.ID.String())
	require.Contains(t, page.body, `name="action" value="cancel"`)
	require.NotContains(t, page.body, `value="retry"`, "retry is for failed attempts")
	confirm := get(t, base+"/attempts/"+a.ID.String()+"/confirm?action=cancel")
	form := url.Values{"action": {"cancel"}, "version": {hidden(t, confirm.body, "version")}, "csrf": {hidden(t, confirm.body, "csrf")}, "reason": {"operator test"}}
	res := do(t, http.MethodPost, base+"/attempts/"+a.ID.String()+"/act", form, nil)
	require.Equal(t, http.StatusSeeOther, res.status)
	loc := res.header.Get("Location")
	require.Contains(t, loc, "/attempts/"+a.ID.String())
	shown := get(t, base+loc)
	require.Contains(t, shown.body, `<p class="flash" role="status">cancel applied</p>`)
	require.Contains(t, shown.body, `id="run-state" class="state canceled"`)
	after, err := b.drv.Repo.GetAttempt(b.ctx, b.db.Pool, &repo.GetAttemptParams{TenantID: tenantA, AttemptID: a.ID})
	require.NoError(t, err)
	require.Equal(t, kfstype.RunStateCanceled, after.RunState)

	// A confirmation at a version someone else changed does nothing.
	stale := b.first(t, tenantA, kfstype.RunStateDispatchPending)
	confirm = get(t, base+"/attempts/"+stale.ID.String()+"/confirm?action=supersede")
	_, err = b.drv.Repo.Cancel(b.ctx, b.db.Pool, &repo.CancelParams{AttemptRef: repo.AttemptRef{TenantID: tenantA,
		KnowledgeSpaceID: stale.KnowledgeSpaceID, AttemptID: stale.ID}})
	require.NoError(t, err)
	form = url.Values{"action": {"supersede"}, "version": {hidden(t, confirm.body, "version")}, "csrf": {hidden(t, confirm.body, "csrf")}}
	res = do(t, http.MethodPost, base+"/attempts/"+stale.ID.String()+"/act", form, nil)
	require.Equal(t, http.StatusSeeOther, res.status)
	require.Contains(t, get(t, base+res.header.Get("Location")).body, "supersede refused: the attempt changed since you confirmed")
	after, err = b.drv.Repo.GetAttempt(b.ctx, b.db.Pool, &repo.GetAttemptParams{TenantID: tenantA, AttemptID: stale.ID})
	require.NoError(t, err)
	require.Equal(t, kfstype.RunStateCanceled, after.RunState)

	// One audit line per action, applied or refused, with who and what.
	lines := strings.Split(strings.TrimSpace(audit.String()), "\n")
	require.Len(t, lines, 2, audit.String())
	require.Regexp(t, `msg=audit at=\S+ session=bearer remote=127.0.0.1:\d+ forwarded_claim="" tenant=`+tenantA+` attempt=`+a.ID.String()+
		` action=cancel from=running to=canceled result=applied reason="" operator_reason="operator test"`, lines[0])
	require.Regexp(t, `msg=audit .* attempt=`+stale.ID.String()+` action=supersede from=canceled to=canceled result=refused reason=".*changed since it was confirmed`, lines[1])

	// A refusal before the form is read names the confined console's
	// tenant, and what X-Forwarded-For says is logged as a claim.
	res = do(t, http.MethodPost, base+"/attempts/"+a.ID.String()+"/act", url.Values{"action": {"explode"}, "reason": {"try\x1b[2J"}},
		map[string]string{"X-Forwarded-For": "203.0.113.9"})
	require.Equal(t, http.StatusBadRequest, res.status)
	lines = strings.Split(strings.TrimSpace(audit.String()), "\n")
	require.Len(t, lines, 3, audit.String())
	require.Regexp(t, ` forwarded_claim=203.0.113.9 tenant=`+tenantA+` attempt=`+a.ID.String()+` action=explode .* result=refused reason="unknown action" operator_reason=try\\x1b\[2J `, lines[2])
}

// TestAttemptsPagesWalkEveryMatch follows the next-page links of a
// filtered list and compares what they list with a SQL query.
func TestAttemptsPagesWalkEveryMatch(t *testing.T) {
	b := setup(t)
	base := b.start(t, console.Config{PageSize: 2})
	rows, err := b.db.Pool.Query(b.ctx, `SELECT id::text FROM document_compilation_attempts
		WHERE tenant_id = $1 AND run_state IN ('succeeded', 'running') ORDER BY completed_at DESC NULLS FIRST, id DESC`, tenantB)
	require.NoError(t, err)
	want, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	require.Greater(t, len(want), 4)
	idRE := regexp.MustCompile(`class="mono" href="/attempts/([0-9a-f-]{36})\?tenant=` + tenantB + `"`)
	nextRE := regexp.MustCompile(`id="next" class="button" href="([^"]+)"`)
	var got []string
	next := "/attempts?tenant=" + tenantB + "&state=succeeded&state=running"
	for pages := 0; next != ""; pages++ {
		require.Less(t, pages, 10)
		page := get(t, base+next)
		require.Equal(t, http.StatusOK, page.status)
		for _, m := range idRE.FindAllStringSubmatch(page.body, -1) {
			got = append(got, m[1])
		}
		next = ""
		if m := nextRE.FindStringSubmatch(page.body); m != nil {
			next = htmlUnescape(m[1])
		}
	}
	require.Equal(t, want, got)
	require.Equal(t, http.StatusBadRequest, get(t, base+"/attempts?tenant="+tenantB+"&after=garbage").status)
	require.Equal(t, http.StatusBadRequest, get(t, base+"/attempts?tenant="+tenantB+"&state=bogus").status)
}

// TestRetryOfAFailedAttempt: retry is offered only for a failed attempt,
// and the confirmed retry makes it dispatch_pending again.
func TestRetryOfAFailedAttempt(t *testing.T) {
	b := setup(t)
	base := b.start(t, console.Config{})
	a := b.first(t, tenantB, kfstype.RunStateFailed)
	page := get(t, fmt.Sprintf("%s/attempts/%s?tenant=%s", base, a.ID, tenantB))
	require.Contains(t, page.body, `value="retry"`)
	require.NotContains(t, page.body, `value="cancel"`, "a failed attempt is not live")
	confirm := get(t, fmt.Sprintf("%s/attempts/%s/confirm?action=retry&tenant=%s", base, a.ID, tenantB))
	require.Contains(t, confirm.body, `<label>Reason (recorded in the audit log) <input name="reason"`, "a retry stores no reason; the audit line does")
	form := url.Values{"action": {"retry"}, "tenant": {tenantB}, "version": {hidden(t, confirm.body, "version")}, "csrf": {hidden(t, confirm.body, "csrf")}}
	res := do(t, http.MethodPost, base+"/attempts/"+a.ID.String()+"/act", form, nil)
	require.Equal(t, http.StatusSeeOther, res.status)
	require.Contains(t, get(t, base+res.header.Get("Location")).body, "retry applied")
	after, err := b.drv.Repo.GetAttempt(b.ctx, b.db.Pool, &repo.GetAttemptParams{TenantID: tenantB, AttemptID: a.ID})
	require.NoError(t, err)
	require.Equal(t, kfstype.RunStateDispatchPending, after.RunState)
}

// TestReleaseOfADeferredStart: release is offered only for a deferred
// start (the page reads its outbox row), says what it does, stores no
// reason, and the confirmed release makes the row due; it is not offered
// on every match. Mutation: ops' release row without its Outbox
// condition fails the due attempt's check.
func TestReleaseOfADeferredStart(t *testing.T) {
	b := setup(t)
	base := b.start(t, console.Config{})
	a := b.drv.Start(b.ctx, t, testfactory.NewScope(b.ctx, t, b.db.Pool, &testfactory.ScopeOpts{TenantID: new(tenantB)}),
		&testfactory.StartOpts{Deferred: new(true)})
	due := b.first(t, tenantB, kfstype.RunStateDispatchPending)
	page := get(t, fmt.Sprintf("%s/attempts/%s?tenant=%s", base, a.ID, tenantB))
	require.Contains(t, page.body, `value="release"`)
	require.NotContains(t, get(t, fmt.Sprintf("%s/attempts/%s?tenant=%s", base, due.ID, tenantB)).body, `value="release"`,
		"an outbox row that is not deferred is not released")
	confirm := get(t, fmt.Sprintf("%s/attempts/%s/confirm?action=release&tenant=%s", base, a.ID, tenantB))
	require.Contains(t, confirm.body, "release makes its deferred outbox row due now")
	require.Contains(t, confirm.body, `<label>Reason (recorded in the audit log) <input name="reason"`, "a release stores no reason; the audit line does")
	form := url.Values{"action": {"release"}, "tenant": {tenantB}, "version": {hidden(t, confirm.body, "version")}, "csrf": {hidden(t, confirm.body, "csrf")}}
	res := do(t, http.MethodPost, base+"/attempts/"+a.ID.String()+"/act", form, nil)
	require.Equal(t, http.StatusSeeOther, res.status)
	require.Contains(t, get(t, base+res.header.Get("Location")).body, "release applied")
	after, o, err := b.drv.Repo.GetAttemptWithOutbox(b.ctx, b.db.Pool, &repo.GetAttemptWithOutboxParams{TenantID: tenantB, AttemptID: a.ID})
	require.NoError(t, err)
	require.Equal(t, kfstype.RunStateDispatchPending, after.RunState)
	require.Equal(t, a.RowVersion+1, after.RowVersion)
	require.False(t, o.AvailableAt.Equal(kfstype.Forever), "the outbox row is due")

	require.NotContains(t, get(t, base+"/attempts?tenant="+tenantB).body, "bulk-release")
	require.Equal(t, http.StatusBadRequest, get(t, base+"/bulk?action=release&tenant="+tenantB).status)
}
