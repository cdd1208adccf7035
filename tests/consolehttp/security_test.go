package consolehttp_test

import (
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/netip"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/knowledgefs/kfsdb/cmd/kfsdb/console"
	"github.com/knowledgefs/kfsdb/cmd/kfsdb/httpguard"
	"github.com/knowledgefs/kfsdb/kfstype"
	"github.com/knowledgefs/kfsdb/repo"
	"github.com/knowledgefs/kfsdb/tests/testfactory"
)

// login posts token to base's /login as a browser's form does and returns
// the session cookie as a Cookie header's value.
func login(t *testing.T, base, token string) string {
	t.Helper()
	res := do(t, http.MethodPost, base+"/login", url.Values{"token": {token}}, map[string]string{"Authorization": ""})
	require.Equal(t, http.StatusSeeOther, res.status, res.body)
	return cookieOf(t, res)
}

func cookieOf(t *testing.T, res response) string {
	t.Helper()
	c := res.header.Get("Set-Cookie")
	require.NotEmpty(t, c, "no cookie set")
	v, _, _ := strings.Cut(c, ";")
	return v
}

// TestProxyForwardedRequestsNeedALogin is issue 26's first finding: a
// tokenless console behind a reverse proxy on the same host that forwards
// with "Host: 127.0.0.1" (httputil.ReverseProxy with SetURL, as nginx's
// proxy_pass does by default) was open to whoever reached the proxy. Now
// a console always asks for a login; a tokenless one makes its token and
// a one-time link, which logs in once.
func TestProxyForwardedRequestsNeedALogin(t *testing.T) {
	b := setup(t)
	a := b.first(t, tenantA, kfstype.RunStateDispatchPending)
	srv, err := console.New(console.Config{DB: b.db.Pool})
	require.NoError(t, err)
	backend := httptest.NewServer(srv.Handler())
	t.Cleanup(backend.Close)
	target, err := url.Parse(backend.URL)
	require.NoError(t, err)
	proxy := httptest.NewServer(&httputil.ReverseProxy{Rewrite: func(r *httputil.ProxyRequest) {
		r.SetURL(target) // Host: 127.0.0.1:PORT, as the console sees a local browser
	}})
	t.Cleanup(proxy.Close)
	noAuth := map[string]string{"Authorization": ""}
	for _, path := range []string{"/", "/attempts?tenant=" + tenantA, fmt.Sprintf("/attempts/%s/confirm?action=cancel&tenant=%s", a.ID, tenantA)} {
		res := do(t, http.MethodGet, proxy.URL+path, nil, noAuth)
		require.Equal(t, http.StatusUnauthorized, res.status, path)
		require.NotContains(t, res.body, a.ID.String(), path)
	}
	res := do(t, http.MethodPost, proxy.URL+"/attempts/"+a.ID.String()+"/act",
		url.Values{"action": {"cancel"}, "tenant": {tenantA}, "version": {fmt.Sprint(a.RowVersion)}}, noAuth)
	require.Equal(t, http.StatusUnauthorized, res.status)
	after, err := b.drv.Repo.GetAttempt(b.ctx, b.db.Pool, &repo.GetAttemptParams{TenantID: tenantA, AttemptID: a.ID})
	require.NoError(t, err)
	require.Equal(t, kfstype.RunStateDispatchPending, after.RunState)

	// The one-time link logs in once, then never again.
	link := srv.LoginLink()
	require.NotEmpty(t, link)
	once, err := url.Parse(link)
	require.NoError(t, err)
	code := once.Query().Get("once")
	form := do(t, http.MethodGet, backend.URL+link, nil, noAuth)
	require.Equal(t, code, hidden(t, form.body, "once"))
	res = do(t, http.MethodPost, backend.URL+"/login", url.Values{"once": {code}}, noAuth)
	require.Equal(t, http.StatusSeeOther, res.status)
	require.Equal(t, http.StatusOK, do(t, http.MethodGet, backend.URL+"/", nil, map[string]string{"Cookie": cookieOf(t, res)}).status)
	require.Equal(t, http.StatusUnauthorized, do(t, http.MethodPost, backend.URL+"/login", url.Values{"once": {code}}, noAuth).status)
	require.Empty(t, srv.LoginLink())
}

// TestSessions: a login is a random session, Secure and __Host- behind a
// trusted TLS proxy, revoked at logout and ended by its expiry; a failed
// login writes one line, its audit line; a weak token is refused.
func TestSessions(t *testing.T) {
	b := setup(t)
	var logs testfactory.SyncBuffer
	log := slog.New(slog.NewTextHandler(&logs, nil))
	base := b.start(t, console.Config{Logger: log})
	first, second := login(t, base, testToken), login(t, base, testToken)
	require.NotEqual(t, first, second, "each login is its own session")
	require.NotContains(t, first+second, testToken)
	for _, c := range []string{first, second} {
		require.Equal(t, http.StatusOK, do(t, http.MethodGet, base+"/", nil, map[string]string{"Cookie": c}).status)
	}
	res := do(t, http.MethodPost, base+"/logout", url.Values{}, map[string]string{"Cookie": first})
	require.Equal(t, http.StatusSeeOther, res.status)
	require.Equal(t, http.StatusUnauthorized, do(t, http.MethodGet, base+"/", nil, map[string]string{"Cookie": first}).status,
		"the cookie is refused after logout, even replayed")
	require.Equal(t, http.StatusOK, do(t, http.MethodGet, base+"/", nil, map[string]string{"Cookie": second}).status,
		"another session lives on")
	require.Contains(t, logs.String(), "msg=audit")
	require.Regexp(t, `msg=audit .*session=session:[0-9a-f]{12} remote=127.0.0.1:\d+ .*action=logout .*result=applied`, logs.String())

	expiring := b.start(t, console.Config{SessionTTL: time.Nanosecond})
	require.Equal(t, http.StatusUnauthorized, do(t, http.MethodGet, expiring+"/", nil, map[string]string{"Cookie": login(t, expiring, testToken)}).status,
		"an expired session is refused")

	// A wrong login writes one line, its audit line; the right token
	// still logs in from the same address (TestLoginsFromOthers…).
	for range 3 {
		res := do(t, http.MethodPost, base+"/login", url.Values{"token": {"wrong-" + testToken}}, map[string]string{"Authorization": ""})
		require.Equal(t, http.StatusUnauthorized, res.status)
	}
	require.Equal(t, 3, strings.Count(logs.String(), "result=refused"))
	require.NotContains(t, logs.String(), "console: login failed")
	require.Equal(t, http.StatusSeeOther, do(t, http.MethodPost, base+"/login", url.Values{"token": {testToken}}, map[string]string{"Authorization": ""}).status)

	for _, weak := range []string{"x", "short-token", strings.Repeat("ab", 20), "password1password1passw0rd"} {
		_, err := console.New(console.Config{DB: b.db.Pool, AuthToken: weak})
		require.ErrorIs(t, err, httpguard.ErrWeakToken, weak)
	}
}

// TestSecureCookieBehindTrustedProxy: behind a TLS proxy the console was
// told to trust, the session cookie is Secure with the __Host- prefix, and
// a POST's Origin is the proxy's public one; from an untrusted peer the
// same forwarded headers change nothing.
func TestSecureCookieBehindTrustedProxy(t *testing.T) {
	b := setup(t)
	srv, err := console.New(console.Config{DB: b.db.Pool, AuthToken: testToken,
		TrustedProxies: []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32"), netip.MustParsePrefix("::1/128")}})
	require.NoError(t, err)
	backend := httptest.NewServer(srv.Handler())
	t.Cleanup(backend.Close)
	target, err := url.Parse(backend.URL)
	require.NoError(t, err)
	proxy := httptest.NewTLSServer(&httputil.ReverseProxy{Rewrite: func(r *httputil.ProxyRequest) {
		r.SetURL(target)
		r.SetXForwarded()
	}})
	t.Cleanup(proxy.Close)
	client := proxy.Client()
	client.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	post := func(origin string) *http.Response {
		req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, proxy.URL+"/login", strings.NewReader(url.Values{"token": {testToken}}.Encode()))
		require.NoError(t, err)
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		req.Header.Set("Origin", origin)
		res, err := client.Do(req)
		require.NoError(t, err)
		res.Body.Close()
		return res
	}
	res := post(proxy.URL)
	require.Equal(t, http.StatusSeeOther, res.StatusCode)
	c := res.Header.Get("Set-Cookie")
	require.True(t, strings.HasPrefix(c, "__Host-kfsdb_console="), c)
	require.Contains(t, c, "; Secure")
	require.Equal(t, http.StatusForbidden, post("http://"+target.Host).StatusCode, "the origin is the proxy's https one")

	// Straight to the console (not through the trusted proxy's TLS): a
	// forged X-Forwarded-Proto from an untrusted peer is not believed.
	direct := b.start(t, console.Config{})
	res2 := do(t, http.MethodPost, direct+"/login", url.Values{"token": {testToken}}, map[string]string{"Authorization": "", "X-Forwarded-Proto": "https"})
	require.Equal(t, http.StatusSeeOther, res2.status)
	require.True(t, strings.HasPrefix(res2.header.Get("Set-Cookie"), "kfsdb_console="))
}

// TestBadInputIs400: input the repo refuses is the client's error: 400
// with the reason, no ERROR line; an oversized body is 413, and ?flash=
// shows only the console's own messages.
func TestBadInputIs400(t *testing.T) {
	b := setup(t)
	var logs testfactory.SyncBuffer
	base := b.start(t, console.Config{Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	a := b.first(t, tenantA, kfstype.RunStateRunning)
	for name, path := range map[string]string{
		"LongTenant":     "/attempts?tenant=" + strings.Repeat("t", 256),
		"NULTenant":      "/attempts?tenant=a%00b",
		"BadUTF8Tenant":  "/attempts?tenant=%ff%fe",
		"ZeroUUID":       "/attempts/00000000-0000-0000-0000-000000000000?tenant=" + tenantA,
		"LongTenantPage": "/attempts/" + a.ID.String() + "?tenant=" + strings.Repeat("t", 256),
	} {
		res := get(t, base+path)
		require.Equal(t, http.StatusBadRequest, res.status, "%s: %s", name, res.body)
	}
	require.NotContains(t, logs.String(), "level=ERROR")

	big := url.Values{"token": {strings.Repeat("x", 64<<10)}}
	require.Equal(t, http.StatusRequestEntityTooLarge, do(t, http.MethodPost, base+"/login", big, map[string]string{"Authorization": ""}).status)

	page := get(t, base+"/attempts/"+a.ID.String()+"?tenant="+tenantA+"&flash=Your+session+expired,+log+in+at+evil.example")
	require.Equal(t, http.StatusOK, page.status)
	require.NotContains(t, page.body, "evil.example")
	page = get(t, base+"/attempts/"+a.ID.String()+"?tenant="+tenantA+"&flash=cancel-applied")
	require.Contains(t, page.body, `<p class="flash" role="status">cancel applied</p>`)
}
