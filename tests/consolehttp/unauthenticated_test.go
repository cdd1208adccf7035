package consolehttp_test

import (
	"net/http"
	"net/http/httptest"
	"net/url"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/knowledgefs/kfsdb/cmd/kfsdb/console"
)

// TestStaticListsNothing: /static/ serves its files by name and lists no
// directory (issue 39: /static/ listed it).
func TestStaticListsNothing(t *testing.T) {
	b := setup(t)
	base := b.start(t, console.Config{})
	css := get(t, base+"/static/console.css")
	require.Equal(t, http.StatusOK, css.status)
	require.Contains(t, css.header.Get("Content-Type"), "text/css")
	for _, path := range []string{"/static/", "/static/.", "/static/nope.css", "/static/console.css/", "/static/../login"} {
		res := do(t, http.MethodGet, base+path, nil, map[string]string{"Authorization": ""})
		require.NotEqual(t, http.StatusOK, res.status, path)
		require.NotContains(t, res.body, `href="console.css"`, path)
	}
	require.Equal(t, http.StatusNotFound, get(t, base+"/static/").status)
}

// TestNoTenantWithoutLogin: a confined console names its tenant only to
// those logged in; the login page, 401, 403 and 404 pages name none
// (issue 39: the login page showed it).
func TestNoTenantWithoutLogin(t *testing.T) {
	b := setup(t)
	base := b.start(t, console.Config{TenantID: tenantA})
	noAuth := map[string]string{"Authorization": ""}
	for name, res := range map[string]response{
		"LoginPage":   do(t, http.MethodGet, base+"/login", nil, noAuth),
		"OnceLink":    do(t, http.MethodGet, base+"/login?once=x", nil, noAuth),
		"WrongLogin":  do(t, http.MethodPost, base+"/login", url.Values{"token": {"wrong-token-0123456789-abcdefgh"}}, noAuth),
		"CrossOrigin": do(t, http.MethodPost, base+"/login", url.Values{"token": {"x"}}, map[string]string{"Authorization": "", "Origin": "http://evil.example"}),
		"NoSession":   do(t, http.MethodGet, base+"/", nil, noAuth),
		"WrongBearer": do(t, http.MethodGet, base+"/attempts", nil, map[string]string{"Authorization": "Bearer wrong-token-0123456789-abcdefgh"}),
		"Static404":   do(t, http.MethodGet, base+"/static/", nil, noAuth),
	} {
		require.NotContains(t, res.body, tenantA, name)
		require.NotContains(t, res.body, "every tenant", name)
	}
	require.Contains(t, get(t, base+"/").body, "tenant <b>"+tenantA+"</b>", "logged in, the scope shows")
}

// TestOnceLinkDiesWithAnyPost: a one-time code is used up by any POST to
// /login that presents it, even one that is then refused, so a leaked
// link cannot be tried again (issue 39: it outlived a refused POST).
// Showing the login page with ?once= uses nothing.
func TestOnceLinkDiesWithAnyPost(t *testing.T) {
	b := setup(t)
	noAuth := map[string]string{"Authorization": ""}
	for name, refused := range map[string]struct {
		form   func(code string) url.Values
		header map[string]string
		status int
	}{
		"CrossOrigin": {func(code string) url.Values { return url.Values{"once": {code}} },
			map[string]string{"Authorization": "", "Origin": "http://evil.example"}, http.StatusForbidden},
		"NoOrigin": {func(code string) url.Values { return url.Values{"once": {code}} },
			map[string]string{"Authorization": "", "Origin": ""}, http.StatusForbidden},
		"AfterAWrongCode": {func(code string) url.Values { return url.Values{"once": {"not-the-code", code}} }, noAuth, http.StatusUnauthorized},
		"Twice":           {func(code string) url.Values { return url.Values{"once": {code, code}} }, noAuth, http.StatusUnauthorized},
	} {
		t.Run(name, func(t *testing.T) {
			srv, base := newServer(t, b)
			link := srv.LoginLink()
			code := onceCode(t, srv)
			for range 2 {
				page := do(t, http.MethodGet, base+link, nil, noAuth)
				require.Equal(t, code, hidden(t, page.body, "once"))
			}
			require.Equal(t, link, srv.LoginLink(), "showing the page uses nothing")

			res := do(t, http.MethodPost, base+"/login", refused.form(code), refused.header)
			require.Equal(t, refused.status, res.status, res.body)
			require.Empty(t, res.header.Get("Set-Cookie"))
			require.Empty(t, srv.LoginLink(), "the refused POST used the code")
			res = do(t, http.MethodPost, base+"/login", url.Values{"once": {code}}, noAuth)
			require.Equal(t, http.StatusUnauthorized, res.status, "the link is dead")
		})
	}

	// Throttled: once the address is told to wait for its failures, the
	// right code still logs in (the address may be the operator's too:
	// see httpguard.Throttle), and is used.
	srv, base := newServer(t, b)
	code := onceCode(t, srv)
	limited := false
	for range 50 {
		res := do(t, http.MethodPost, base+"/login", url.Values{"token": {"wrong-token-0123456789-abcdefgh"}}, noAuth)
		if limited = res.status == http.StatusTooManyRequests; limited {
			break
		}
	}
	require.True(t, limited, "wrong logins never limited")
	res := do(t, http.MethodPost, base+"/login", url.Values{"once": {code}}, noAuth)
	require.Equal(t, http.StatusSeeOther, res.status)
	require.Empty(t, srv.LoginLink(), "the POST used the code")
	require.NotEqual(t, http.StatusSeeOther, do(t, http.MethodPost, base+"/login", url.Values{"once": {code}}, noAuth).status,
		"the code is dead")
}

// newServer serves a tokenless console (it makes its token and a
// one-time link) and returns it and its base URL.
func newServer(t *testing.T, b *testBundle) (*console.Server, string) {
	t.Helper()
	srv, err := console.New(console.Config{DB: b.db.Pool})
	require.NoError(t, err)
	ts := httptest.NewServer(srv.Handler())
	t.Cleanup(ts.Close)
	return srv, ts.URL
}

// onceCode is the code of srv's one-time login link.
func onceCode(t *testing.T, srv *console.Server) string {
	t.Helper()
	u, err := url.Parse(srv.LoginLink())
	require.NoError(t, err)
	code := u.Query().Get("once")
	require.NotEmpty(t, code)
	return code
}
