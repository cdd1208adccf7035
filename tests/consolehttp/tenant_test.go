package consolehttp_test

import (
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/knowledgefs/kfsdb/cmd/kfsdb/console"
	"github.com/knowledgefs/kfsdb/cmd/kfsdb/ops"
	"github.com/knowledgefs/kfsdb/repo"
	"github.com/knowledgefs/kfsdb/tests/consolepage"
	"github.com/knowledgefs/kfsdb/tests/testfactory"
)

// tenantForm is the tenant page's form that posts action.
func tenantForm(t *testing.T, page, action string) url.Values {
	t.Helper()
	return tenantFormWith(t, page, `name="action" value="`+action+`"`)
}

// tenantFormWith is the tenant page's post form that holds marker.
func tenantFormWith(t *testing.T, page, marker string) url.Values {
	t.Helper()
	i := strings.Index(page, marker)
	require.GreaterOrEqual(t, i, 0, "no form with %s in:\n%s", marker, page)
	start := strings.LastIndex(page[:i], `<form method="post" action="/tenant"`)
	form, ok := consolepage.PostForm(page[start:], "/tenant")
	require.True(t, ok)
	return form
}

// limitsOf is tenant's limits as the database holds them; nil: none.
func (b *testBundle) limitsOf(t *testing.T, tenant string) *repo.TenantLimit {
	t.Helper()
	l, err := ops.TenantLimits(b.ctx, b.drv.Repo, b.db.Pool, tenant)
	require.NoError(t, err)
	return l
}

// TestTenantLimitsPage pauses, rate-limits, caps and resumes a tenant as
// the tenant page's forms do, each change audited with the limits before
// and after; a form for limits that changed since it was shown is
// refused, and so is a change that does not apply. Mutations: the Seen
// check of ops.ChangeTenantLimits removed fails StaleForm (the rate is
// overwritten); the audit call of an applied change removed fails the
// audit lines.
func TestTenantLimitsPage(t *testing.T) {
	b := setup(t)
	var audit testfactory.SyncBuffer
	base := b.start(t, console.Config{AuditLogger: slog.New(slog.NewTextHandler(&audit, nil))})
	page := get(t, base+"/tenant")
	require.Equal(t, http.StatusOK, page.status)
	require.Contains(t, page.body, "No tenant is limited.")
	require.Contains(t, get(t, base+"/attempts?tenant="+tenantA).body, `href="/tenant?tenant=`+tenantA+`"`)

	post := func(form url.Values) string {
		t.Helper()
		res := do(t, http.MethodPost, base+"/tenant", form, nil)
		require.Equal(t, http.StatusSeeOther, res.status, res.body)
		return get(t, base+res.header.Get("Location")).body
	}
	page = get(t, base+"/tenant?tenant="+tenantA)
	require.Contains(t, page.body, `id="summary">none<`)
	stale := tenantForm(t, page.body, ops.TenantSetLimit)
	pause := tenantForm(t, page.body, ops.TenantPause)
	pause.Set("reason", "incident 42")
	shown := post(pause)
	require.Contains(t, shown, `<p class="flash" role="status">tenant-pause applied</p>`)
	require.Contains(t, shown, "incident 42")
	l := b.limitsOf(t, tenantA)
	require.True(t, l.Paused())
	require.Equal(t, "incident 42", l.PauseReason)

	set := tenantForm(t, shown, ops.TenantSetLimit)
	set.Set("rate", "2.5")
	set.Set("burst", "4")
	set.Set("max_running", "3")
	shown = post(set)
	require.Contains(t, shown, "tenant-set-limit applied")
	require.Contains(t, shown, `id="rate">2.5 leases/s, burst 4`)
	l = b.limitsOf(t, tenantA)
	require.Equal(t, 2.5, l.Rate)
	require.Equal(t, int32(4), l.Burst)
	require.Equal(t, int32(3), l.MaxRunning)

	// StaleForm: the set-limit form of the first page, when the tenant had
	// no limit, is refused now.
	stale.Set("rate", "100")
	require.Contains(t, post(stale), "tenant-set-limit refused: the tenant&#39;s limits changed since you looked")
	require.Equal(t, 2.5, b.limitsOf(t, tenantA).Rate, "the stale form changed nothing")

	clearCap := tenantFormWith(t, shown, `name="clear" value="cap"`)
	shown = post(clearCap)
	require.Contains(t, shown, "tenant-clear-limit applied")
	resume := tenantForm(t, shown, ops.TenantResume)
	shown = post(resume)
	require.Contains(t, shown, "tenant-resume applied")
	l = b.limitsOf(t, tenantA)
	require.False(t, l.Paused())
	require.Equal(t, int32(0), l.MaxRunning)
	require.Equal(t, 2.5, l.Rate)
	// Resuming a tenant that is not paused does not apply: a fresh
	// page's form sent with the resume action's name is refused by its
	// token, and the one resume form shown before is for paused limits.
	require.Contains(t, post(resume), "tenant-resume refused: the tenant&#39;s limits changed since you looked")

	for _, want := range []string{
		`tenant=` + tenantA + ` attempt="" action=tenant-pause from=none to="paused since \S+" result=applied reason="" operator_reason="incident 42"`,
		`action=tenant-set-limit from="paused since \S+" to="cap 3, 2.5 leases/s \(burst 4\), paused since \S+" result=applied`,
		`action=tenant-set-limit from="cap 3, 2.5 leases/s \(burst 4\), paused since \S+" to="cap 3, 2.5 leases/s \(burst 4\), paused since \S+" result=refused reason="the limits changed since they were read`,
		`action=tenant-clear-limit from="cap 3, 2.5 leases/s \(burst 4\), paused since \S+" to="2.5 leases/s \(burst 4\), paused since \S+" result=applied`,
		`action=tenant-resume from="2.5 leases/s \(burst 4\), paused since \S+" to="2.5 leases/s \(burst 4\)" result=applied`,
	} {
		require.Regexp(t, want, audit.String())
	}
	page = get(t, base+"/tenant")
	require.Contains(t, page.body, `href="/tenant?tenant=`+tenantA+`"`, "the list shows the limited tenant")
}

// TestTenantLimitsRefusals: a change without its token, with another
// action's or tenant's token, with a bad number, on a read-only or a
// confined console is refused and changes nothing; the read-only page
// shows no form, the confined console no page. Mutations: the token not
// binding the action fails OtherAction; the confined check removed from
// GET /tenant fails ConfinedPage.
func TestTenantLimitsRefusals(t *testing.T) {
	b := setup(t)
	var audit testfactory.SyncBuffer
	open := b.start(t, console.Config{AuditLogger: slog.New(slog.NewTextHandler(&audit, nil))})
	readOnly := b.start(t, console.Config{ReadOnly: true})
	confined := b.start(t, console.Config{TenantID: tenantA, AuditLogger: slog.New(slog.NewTextHandler(&audit, nil))})
	page := get(t, open+"/tenant?tenant="+tenantA).body
	pause := tenantForm(t, page, ops.TenantPause)
	set := tenantForm(t, page, ops.TenantSetLimit)
	with := func(v url.Values, kv ...string) url.Values {
		out := url.Values{}
		for k, vs := range v {
			out[k] = append([]string(nil), vs...)
		}
		for i := 0; i < len(kv); i += 2 {
			if kv[i+1] == "" {
				out.Del(kv[i])
			} else {
				out.Set(kv[i], kv[i+1])
			}
		}
		return out
	}
	postTo := func(base string, v url.Values) int { return do(t, http.MethodPost, base+"/tenant", v, nil).status }
	for name, tc := range map[string]struct{ got, want int }{
		"NoCSRF":       {postTo(open, with(pause, "csrf", "")), http.StatusForbidden},
		"OtherAction":  {postTo(open, with(pause, "action", ops.TenantResume)), http.StatusForbidden},
		"OtherTenant":  {postTo(open, with(pause, "tenant", tenantB)), http.StatusForbidden},
		"UnknownAct":   {postTo(open, with(pause, "action", "tenant-delete")), http.StatusBadRequest},
		"BadRate":      {postTo(open, with(set, "rate", "fast")), http.StatusBadRequest},
		"NegativeRate": {postTo(open, with(set, "rate", "-1")), http.StatusBadRequest},
		"BurstAlone":   {postTo(open, with(set, "burst", "3")), http.StatusBadRequest},
		"ReadOnlyPost": {postTo(readOnly, pause), http.StatusForbidden},
		"ConfinedPost": {postTo(confined, with(pause, "tenant", "")), http.StatusForbidden},
		"ConfinedPage": {get(t, confined+"/tenant").status, http.StatusForbidden},
		"ReadOnlyPage": {get(t, readOnly+"/tenant?tenant="+tenantA).status, http.StatusOK},
	} {
		t.Run(name, func(t *testing.T) { require.Equal(t, tc.want, tc.got) })
	}
	require.Nil(t, b.limitsOf(t, tenantA), "no refused change limited the tenant")
	require.Nil(t, b.limitsOf(t, tenantB))
	require.NotContains(t, get(t, readOnly+"/tenant?tenant="+tenantA).body, `method="post" action="/tenant"`)
	require.NotContains(t, get(t, confined+"/").body, `href="/tenant"`, "a confined console links to no tenant page")
	require.Regexp(t, `tenant=`+tenantA+` attempt="" action=tenant-pause .*result=refused reason="a confined console does not manage tenants' limits"`, audit.String())
	require.Regexp(t, `action=tenant-set-limit .*result=refused reason="rate is not a number of leases per second"`, audit.String())
	require.Regexp(t, `action=tenant-set-limit .*result=refused reason="kfsdb: invalid input: Rate`, audit.String())
}
