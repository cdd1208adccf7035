// Package console is the web console of `kfsdb console`: server-rendered
// pages (html/template, one embedded stylesheet, no JavaScript) that show
// attempts by state, the outbox backlog, throughput and stuck attempts,
// list and open attempts, and act on one with an action of ops' table
// (cancel, retry, supersede, release), or on every attempt a filter
// matches (a dry run, a confirmation, then batches),
// through cmd/kfsdb/ops, as the CLI does, and show and change a tenant's
// limits of direct delivery (cap, rate, pause), as `kfsdb tenant` does.
//
// Security: every page and action goes through Handler's checks (see
// security.go): a login session (started by POSTing the token or a
// one-time link's code to /login) or the bearer token on every page, the
// same origin and a CSRF token bound to the session, the attempt's row
// version and a deadline on every POST, no POST at all when read-only,
// and, with Config.TenantID, every repo call confined to that tenant. No
// request is trusted for where it comes from: a proxy on this host makes
// a remote browser look local. Every action, applied or refused, writes
// an audit line.
package console

import (
	"cmp"
	"context"
	"crypto/rand"
	"embed"
	"errors"
	"fmt"
	"html/template"
	"io/fs"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"sync"
	"time"

	"github.com/knowledgefs/kfsdb/cmd/kfsdb/httpguard"
	"github.com/knowledgefs/kfsdb/cmd/kfsdb/ops"
	"github.com/knowledgefs/kfsdb/repo"
)

//go:embed templates/*.html
var templateFS embed.FS

//go:embed static/console.css
var staticFS embed.FS

// Config configures a console. A Server is safe for concurrent use.
type Config struct {
	// AuditLogger receives the audit lines (message AuditMessage), one
	// per login, logout and action, applied or refused. Defaults to
	// Logger.
	AuditLogger *slog.Logger
	// BulkMax is the most attempts one bulk action may match
	// (1..ops.MaxBulkMax): a dry run that matches more is refused with a
	// message to narrow the filter. Defaults to ops.BulkMaxDefault.
	BulkMax int
	// BulkBatchSize is how many attempts each batch of a bulk action acts
	// on, in one transaction (1..ops.MaxBulkBatch). Defaults to
	// ops.BulkBatchDefault.
	BulkBatchSize int
	// BulkTimeout bounds the execution of one bulk action, which goes on
	// if the browser goes away (each statement is still bounded by the
	// database's statement_timeout); the attempts it did not reach are
	// reported as such. Defaults to BulkTimeoutDefault.
	BulkTimeout time.Duration
	// AuthToken logs in: POSTed to /login (which starts a session) or sent
	// as "Authorization: Bearer <token>". It must pass
	// httpguard.CheckToken. Defaults to "": the console makes a strong
	// one that nobody sees, and LoginLink gives a link that logs in once.
	AuthToken string
	// DB is the database every page reads and every action writes.
	// Required.
	DB repo.DBTX
	// Logger receives failed requests. Defaults to slog.Default().
	Logger *slog.Logger
	// ThroughputCap is the most ended attempts the overview's throughput
	// reads (repo.ThroughputParams.Cap); past it the counts read "≥".
	// Defaults to repo.ThroughputCapDefault.
	ThroughputCap int32
	// QueryTimeout bounds each request, its database reads and writes
	// included. Defaults to QueryTimeoutDefault.
	QueryTimeout time.Duration
	// PageSize is how many attempts a list page shows (1..repo.MaxListLimit).
	// Defaults to PageSizeDefault.
	PageSize int32
	// ReadOnly hides every action and refuses the action routes (403).
	// Defaults to false.
	ReadOnly bool
	// Repo runs every read and transition. Defaults to repo.New(nil).
	Repo *repo.Repo
	// SessionTTL is how long a login lasts. Defaults to
	// SessionTTLDefault.
	SessionTTL time.Duration
	// TrustedProxies are the addresses of the TLS-terminating proxies in
	// front of the console (each at least a /8, IPv6 /32:
	// httpguard.CheckTrustedProxy). From them, and only from them, the
	// element the proxy appended to Forwarded or X-Forwarded-* is
	// believed (httpguard.LastHop: malformed or conflicting headers are
	// not): proto https makes the session cookie Secure (and __Host-),
	// the host is the origin POSTs must come from, and the client address
	// is the one failed logins are counted by. Defaults to none.
	TrustedProxies []netip.Prefix
	// Throttle counts wrong tokens and one-time codes per client (the
	// address clientAddr believes) and bounds their log lines; a right
	// token is never refused for it. Share one with the metrics server
	// (kfsdb console does). Defaults to httpguard.NewThrottle(nil).
	Throttle *httpguard.Throttle
	// TenantID confines the console to one tenant: it is passed to every
	// repo call, and another tenant's attempt is not found (404). Defaults
	// to "": every tenant.
	TenantID string
}

// Defaults of Config.
const (
	PageSizeDefault     = 50
	QueryTimeoutDefault = 5 * time.Second
	SessionTTLDefault   = 8 * time.Hour
	// BulkTimeoutDefault is under the server's write timeout (60 s), so
	// that the result page still reaches the browser.
	BulkTimeoutDefault = 45 * time.Second
)

// ErrInvalidConfig is returned by New for a missing or invalid field.
var ErrInvalidConfig = errors.New("invalid console config")

// Server serves the console's pages; Handler is its http.Handler.
type Server struct {
	cfg       Config
	repo      *repo.Repo
	log       *slog.Logger
	auditLog  *slog.Logger
	pages     map[string]*template.Template
	csrfKey   []byte
	static    fs.FS
	sessions  sessions
	bulk      bulkStore
	throttle  *httpguard.Throttle
	generated bool // the console made AuthToken

	onceMu      sync.Mutex
	once        string // the one-time login code, "" once used
	onceExpires time.Time
}

// New checks cfg, fills its defaults and parses the templates.
func New(cfg Config) (*Server, error) {
	switch {
	case cfg.DB == nil:
		return nil, fmt.Errorf("%w: DB is required", ErrInvalidConfig)
	case cfg.PageSize < 0 || cfg.PageSize > repo.MaxListLimit:
		return nil, fmt.Errorf("%w: PageSize must be 1..%d", ErrInvalidConfig, repo.MaxListLimit)
	case len(cfg.TenantID) > repo.MaxTenantIDLength:
		return nil, fmt.Errorf("%w: TenantID must be at most %d characters", ErrInvalidConfig, repo.MaxTenantIDLength)
	case cfg.ThroughputCap < 0 || cfg.ThroughputCap > repo.MaxThroughputCap:
		return nil, fmt.Errorf("%w: ThroughputCap must be 1..%d", ErrInvalidConfig, repo.MaxThroughputCap)
	case cfg.QueryTimeout < 0 || cfg.SessionTTL < 0 || cfg.BulkTimeout < 0:
		return nil, fmt.Errorf("%w: QueryTimeout, SessionTTL and BulkTimeout must not be negative", ErrInvalidConfig)
	case cfg.BulkMax < 0 || cfg.BulkMax > ops.MaxBulkMax:
		return nil, fmt.Errorf("%w: BulkMax must be 1..%d", ErrInvalidConfig, ops.MaxBulkMax)
	case cfg.BulkBatchSize < 0 || cfg.BulkBatchSize > ops.MaxBulkBatch:
		return nil, fmt.Errorf("%w: BulkBatchSize must be 1..%d", ErrInvalidConfig, ops.MaxBulkBatch)
	}
	if cfg.AuthToken != "" {
		if err := httpguard.CheckToken(cfg.AuthToken); err != nil {
			return nil, fmt.Errorf("%w: AuthToken: %w", ErrInvalidConfig, err)
		}
	}
	if err := checkTrustedProxies(cfg.TrustedProxies); err != nil {
		return nil, err
	}
	cfg.PageSize = cmp.Or(cfg.PageSize, PageSizeDefault)
	cfg.QueryTimeout = cmp.Or(cfg.QueryTimeout, QueryTimeoutDefault)
	cfg.SessionTTL = cmp.Or(cfg.SessionTTL, SessionTTLDefault)
	cfg.BulkMax = cmp.Or(cfg.BulkMax, ops.BulkMaxDefault)
	cfg.BulkBatchSize = cmp.Or(cfg.BulkBatchSize, ops.BulkBatchDefault)
	cfg.BulkTimeout = cmp.Or(cfg.BulkTimeout, BulkTimeoutDefault)
	s := &Server{cfg: cfg, repo: cfg.Repo, log: cfg.Logger, auditLog: cfg.AuditLogger, csrfKey: make([]byte, 32),
		throttle: cfg.Throttle}
	if s.repo == nil {
		s.repo = repo.New(nil)
	}
	if s.throttle == nil {
		s.throttle = httpguard.NewThrottle(nil)
	}
	s.log = cmp.Or(s.log, slog.Default())
	s.auditLog = cmp.Or(s.auditLog, s.log)
	// A per-process secret: CSRF tokens and sessions die with the
	// process, so a restart logs everyone out.
	_, _ = rand.Read(s.csrfKey) // never fails (crypto/rand panics instead)
	if s.cfg.AuthToken == "" {
		s.cfg.AuthToken, s.generated = randomID(), true
		s.once, s.onceExpires = randomID(), time.Now().Add(oneTimeTTL)
	}
	var err error
	if s.pages, err = parsePages(); err != nil {
		return nil, err
	}
	s.static, _ = fs.Sub(staticFS, "static") // never fails: "static" is a valid path
	return s, nil
}

func parsePages() (map[string]*template.Template, error) {
	pages := map[string]*template.Template{}
	for _, name := range []string{"overview", "attempts", "attempt", "confirm", "bulk", "bulkresult", "tenant", "login", "error"} {
		t, err := template.New(name).Funcs(funcs).ParseFS(templateFS, "templates/layout.html", "templates/"+name+".html")
		if err != nil {
			return nil, fmt.Errorf("parse the %s page: %w", name, err)
		}
		pages[name] = t
	}
	return pages, nil
}

// Handler returns the console's routes behind its security checks.
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /{$}", s.overview)
	mux.HandleFunc("GET /attempts", s.attempts)
	mux.HandleFunc("GET /attempts/{id}", s.attempt)
	mux.HandleFunc("GET /attempts/{id}/confirm", s.confirm)
	mux.HandleFunc("POST /attempts/{id}/act", s.act)
	mux.HandleFunc("GET /bulk", s.bulkDryRun)
	mux.HandleFunc("POST /bulk", s.bulkRun)
	mux.HandleFunc("GET /bulk/{id}", s.bulkResult)
	mux.HandleFunc("GET /tenant", s.tenant)
	mux.HandleFunc("POST /tenant", s.tenantChange)
	mux.HandleFunc("GET /login", s.loginForm)
	mux.HandleFunc("POST /login", s.login)
	mux.HandleFunc("POST /logout", s.logout)
	mux.HandleFunc("GET /static/", s.serveStatic)
	return s.secure(mux)
}

// serveTimeouts bound the console's connections; a request's own work
// is bounded by Config.QueryTimeout, well under Write.
var serveTimeouts = httpguard.Timeouts{ReadHeader: 10 * time.Second, Read: 30 * time.Second, Write: 60 * time.Second, Idle: 2 * time.Minute}

// Serve serves h on ln until ctx ends, then lets requests in flight end
// for up to 2 seconds and closes every connection.
func Serve(ctx context.Context, ln net.Listener, h http.Handler) error {
	srv := httpguard.NewServer(h, serveTimeouts)
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ln) }()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
	}
	shutdownCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
	defer cancel()
	if err := srv.Shutdown(shutdownCtx); err != nil {
		// Browsers hold speculative connections that never send a request;
		// Shutdown waits for them, so close them.
		if err := srv.Close(); err != nil {
			return fmt.Errorf("close the console: %w", err)
		}
	}
	return nil
}
