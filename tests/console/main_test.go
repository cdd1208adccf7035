// Package console_test drives the kfsdb web console (cmd/kfsdb/console)
// with headless Chromium, on a database filled by a workload of several
// tenants, and checks what a person sees; it saves a full-page screenshot
// of each page under screenshots/ (git-ignored; the path is logged).
package console_test

import (
	"cmp"
	"context"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"

	"github.com/knowledgefs/kfsdb/cmd/kfsdb/console"
	"github.com/knowledgefs/kfsdb/kfstype"
	"github.com/knowledgefs/kfsdb/repo"
	"github.com/knowledgefs/kfsdb/tests/capability"
	"github.com/knowledgefs/kfsdb/tests/pgtest"
	"github.com/knowledgefs/kfsdb/tests/testfactory"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// EnvChromium names the browser binary; defaults to chromium on $PATH.
const EnvChromium = "KFS_CHROMIUM"

var tenants = []string{"acme", "globex", "initech"}

// testBundle is a database with a workload, a browser and a screenshot
// directory.
type testBundle struct {
	ctx      context.Context
	db       *pgtest.DB
	repo     *repo.Repo
	attempts map[string][]*kfstype.Attempt
	browser  context.Context
	shots    string
}

func setup(t *testing.T) *testBundle {
	t.Helper()
	chromium := os.Getenv(EnvChromium)
	if chromium == "" {
		var err error
		if chromium, err = exec.LookPath("chromium"); err != nil {
			capability.Missing(t, capability.Browser, "no chromium on $PATH (apt-get install chromium, or set %s)", EnvChromium)
		}
	}
	db := pgtest.NewDB(t)
	b := &testBundle{ctx: t.Context(), db: db, repo: repo.New(nil)}
	// The workload's attempts start and end over the last 15 minutes (20 s
	// apart on the driver's clock), so the throughput has a shape and the
	// oldest leases and relay locks have expired: stuck attempts to show.
	const perTenant, step = 15, 20 * time.Second
	clock := testfactory.ClockAt(time.Now().Add(-time.Duration(perTenant*len(tenants)) * step))
	drv := &testfactory.Driver{Repo: repo.New(&repo.Config{Clock: clock}), DB: db.Pool}
	b.attempts = testfactory.Workload(b.ctx, t, drv, tenants, perTenant, &testfactory.WorkloadOpts{Clock: clock, Step: step})

	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(chromium), chromedp.Headless,
		chromedp.DisableGPU, chromedp.WindowSize(1280, 900), chromedp.Flag("disable-dev-shm-usage", true))
	if os.Geteuid() == 0 {
		opts = append(opts, chromedp.NoSandbox) // Chromium refuses to run as root with its sandbox
	}
	alloc, cancelAlloc := chromedp.NewExecAllocator(b.ctx, opts...)
	browser, cancelBrowser := chromedp.NewContext(alloc)
	t.Cleanup(func() { cancelBrowser(); cancelAlloc() })
	require.NoError(t, chromedp.Do(browser)) // start it now, once
	b.browser = browser

	dir, err := filepath.Abs("screenshots")
	require.NoError(t, err)
	require.NoError(t, os.MkdirAll(dir, 0o755))
	b.shots = dir
	t.Logf("screenshots in %s", dir)
	return b
}

// token is the consoles' token, unless a test gives its own.
const token = "correct-horse-battery-staple"

// start serves a console with cfg (AuthToken token when empty) on a real
// listener on 127.0.0.1:0 and returns its base URL.
func (b *testBundle) start(t *testing.T, cfg console.Config) string {
	t.Helper()
	cfg.AuthToken = cmp.Or(cfg.AuthToken, token)
	_, base := b.startServer(t, cfg)
	return base
}

// startServer serves a console with cfg as it is (no AuthToken: the
// console makes its own) and returns the server and its base URL.
func (b *testBundle) startServer(t *testing.T, cfg console.Config) (*console.Server, string) {
	t.Helper()
	cfg.DB, cfg.Repo = b.db.Pool, b.repo
	srv, err := console.New(cfg)
	require.NoError(t, err)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- console.Serve(ctx, ln, srv.Handler()) }()
	t.Cleanup(func() { cancel(); require.NoError(t, <-done) })
	return srv, "http://" + ln.Addr().String()
}

// login logs the tab in to base as a person does: the login page, the
// token typed, the form submitted; it waits for the overview.
func (b *testBundle) login(t *testing.T, tab context.Context, base string) {
	t.Helper()
	do(t, tab, chromedp.Navigate(base+"/login"), chromedp.WaitVisible(chromedp.CSS(`input[name="token"]`)),
		chromedp.SendKeys(chromedp.CSS(`input[name="token"]`), token), chromedp.Submit(chromedp.CSS(`form.login`)),
		chromedp.WaitVisible(chromedp.CSS(`#states`)))
}

// tab opens a browser tab that closes with the test.
func (b *testBundle) tab(t *testing.T) context.Context {
	t.Helper()
	tab, cancel := chromedp.NewContext(b.browser)
	tab, cancelTimeout := context.WithTimeout(tab, 60*time.Second)
	t.Cleanup(func() { cancelTimeout(); cancel() })
	return tab
}

// screenshot saves the tab's full page as screenshots/<name>.png.
func (b *testBundle) screenshot(t *testing.T, tab context.Context, name string) {
	t.Helper()
	png, err := chromedp.Run(tab, chromedp.FullScreenshot(100)) // 100: PNG, not JPEG
	require.NoError(t, err)
	path := filepath.Join(b.shots, name+".png")
	require.NoError(t, os.WriteFile(path, png, 0o644))
	t.Logf("screenshot %s", path)
}

// first returns the tenant's first attempt in state.
func (b *testBundle) first(t *testing.T, tenant string, state kfstype.RunState) *kfstype.Attempt {
	t.Helper()
	return testfactory.FirstInState(t, b.attempts[tenant], state)
}

// do runs browser steps in tab.
func do(t *testing.T, tab context.Context, steps ...chromedp.Action[chromedp.Void]) {
	t.Helper()
	require.NoError(t, chromedp.Do(tab, steps...))
}

// text is the text of the first element css selects.
func text(t *testing.T, tab context.Context, css string) string {
	t.Helper()
	s, err := chromedp.Run(tab, chromedp.Text(chromedp.CSS(css)))
	require.NoError(t, err)
	return s
}

// eval is the value of a JavaScript expression in the page (the test's
// own reading of the DOM; the console's pages carry no script).
func eval[T any](t *testing.T, tab context.Context, expr string) T {
	t.Helper()
	v, err := chromedp.Run(tab, chromedp.Evaluate[T](expr))
	require.NoError(t, err)
	return v
}

// sqlInt runs a one-number query.
func (b *testBundle) sqlInt(t *testing.T, query string, args ...any) int {
	t.Helper()
	var n int
	require.NoError(t, b.db.Pool.QueryRow(b.ctx, query, args...).Scan(&n))
	return n
}
