// Package consolehttp_test drives the kfsdb web console (cmd/kfsdb/console)
// over HTTP, without a browser, on a database filled by a workload of two
// tenants: the overview's numbers and its capped throughput, pages, cancel
// and retry through their confirmations, sessions, logins behind a proxy
// and the security rules. tests/console walks the same pages in Chromium.
// It is in the tests module so that cmd/kfsdb, which is released, never
// requires it.
package consolehttp_test

import (
	"cmp"
	"context"
	"html"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/knowledgefs/kfsdb/cmd/kfsdb/console"
	"github.com/knowledgefs/kfsdb/kfstype"
	"github.com/knowledgefs/kfsdb/repo"
	"github.com/knowledgefs/kfsdb/tests/pgtest"
	"github.com/knowledgefs/kfsdb/tests/testfactory"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

const tenantA, tenantB = "console-a", "console-b"

// testBundle is a database with a workload of two tenants and a way to
// start consoles on it.
type testBundle struct {
	ctx      context.Context
	db       *pgtest.DB
	drv      *testfactory.Driver
	attempts map[string][]*kfstype.Attempt
}

func setup(t *testing.T) *testBundle {
	t.Helper()
	t.Parallel()
	db := pgtest.NewDB(t)
	drv := &testfactory.Driver{Repo: repo.New(nil), DB: db.Pool}
	b := &testBundle{ctx: t.Context(), db: db, drv: drv}
	b.attempts = testfactory.Workload(b.ctx, t, drv, []string{tenantA, tenantB}, 14, nil)
	return b
}

// testToken is the token of the consoles start serves (unless the test
// gives its own); do sends it as a bearer token unless told otherwise.
const testToken = "pnQ0d95BcD9bBxs5G47I79FCLk-xYiRmKctF4Pdc3f8"

// start serves a console with cfg (DB filled in, AuthToken testToken when
// empty) and returns its base URL.
func (b *testBundle) start(t *testing.T, cfg console.Config) string {
	t.Helper()
	cfg.DB = b.db.Pool
	cfg.AuthToken = cmp.Or(cfg.AuthToken, testToken)
	srv, err := console.New(cfg)
	require.NoError(t, err)
	ts := httptest.NewServer(srv.Handler())
	t.Cleanup(ts.Close)
	return ts.URL
}

// first returns the tenant's first attempt in state.
func (b *testBundle) first(t *testing.T, tenant string, state kfstype.RunState) *kfstype.Attempt {
	t.Helper()
	return testfactory.FirstInState(t, b.attempts[tenant], state)
}

// response is a request's status, headers and body; redirects are not
// followed.
type response struct {
	status int
	header http.Header
	body   string
}

var noRedirects = &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}

func do(t *testing.T, method, u string, form url.Values, header map[string]string) response {
	t.Helper()
	var body io.Reader
	if form != nil {
		body = strings.NewReader(form.Encode())
	}
	req, err := http.NewRequestWithContext(t.Context(), method, u, body)
	require.NoError(t, err)
	if form != nil {
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	// What a browser's own form post carries, and the test's token; a
	// header given as "" is left out.
	req.Header.Set("Authorization", "Bearer "+testToken)
	if method == http.MethodPost {
		req.Header.Set("Origin", "http://"+req.URL.Host)
	}
	for k, v := range header {
		switch {
		case k == "Host":
			req.Host = v
		case v == "":
			req.Header.Del(k)
		default:
			req.Header.Set(k, v)
		}
	}
	if _, ok := header["Cookie"]; ok {
		req.Header.Del("Authorization")
	}
	res, err := noRedirects.Do(req)
	require.NoError(t, err)
	defer res.Body.Close()
	raw, err := io.ReadAll(res.Body)
	require.NoError(t, err)
	return response{status: res.StatusCode, header: res.Header, body: string(raw)}
}

func get(t *testing.T, u string) response { t.Helper(); return do(t, http.MethodGet, u, nil, nil) }

// hidden reads a hidden form field's value from a page.
func hidden(t *testing.T, page, name string) string {
	t.Helper()
	m := regexp.MustCompile(`name="` + name + `" value="([^"]*)"`).FindStringSubmatch(page)
	require.NotNil(t, m, "no hidden field %s in:\n%s", name, page)
	return m[1]
}

// htmlUnescape undoes the escaping html/template gives a URL in an href.
func htmlUnescape(s string) string { return html.UnescapeString(s) }
