// Package console is the web console of `kfsdb console`: server-rendered
// pages (html/template, one embedded stylesheet, no JavaScript) that show
// attempts by state, the outbox backlog, throughput and stuck attempts,
// list and open attempts, and cancel, retry or supersede one through
// cmd/kfsdb/ops, as the CLI does.
//
// Security: every page and action goes through Handler's checks (see
// security.go): an optional bearer token (header or login cookie), a
// loopback Host when there is no token, a CSRF token on every POST, no POST
// at all when read-only, and, with Config.TenantID, every repo call
// confined to that tenant.
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
	"time"

	"github.com/knowledgefs/kfsdb/repo"
)

//go:embed templates/*.html
var templateFS embed.FS

//go:embed static/console.css
var staticFS embed.FS

// Config configures a console. A Server is safe for concurrent use.
type Config struct {
	// AuthToken, when set, must come with every request: as
	// "Authorization: Bearer <token>" or as the cookie /login sets.
	// Defaults to "": no token, and then only loopback Host headers are
	// served (a DNS-rebound name is refused).
	AuthToken string
	// DB is the database every page reads and every action writes.
	// Required.
	DB repo.DBTX
	// Logger receives failed requests. Defaults to slog.Default().
	Logger *slog.Logger
	// PageSize is how many attempts a list page shows (1..repo.MaxListLimit).
	// Defaults to PageSizeDefault.
	PageSize int32
	// ReadOnly hides every action and refuses the action routes (403).
	// Defaults to false.
	ReadOnly bool
	// Repo runs every read and transition. Defaults to repo.New(nil).
	Repo *repo.Repo
	// TenantID confines the console to one tenant: it is passed to every
	// repo call, and another tenant's attempt is not found (404). Defaults
	// to "": every tenant.
	TenantID string
}

// PageSizeDefault is Config.PageSize when zero.
const PageSizeDefault = 50

// ErrInvalidConfig is returned by New for a missing or invalid field.
var ErrInvalidConfig = errors.New("invalid console config")

// Server serves the console's pages; Handler is its http.Handler.
type Server struct {
	cfg       Config
	repo      *repo.Repo
	log       *slog.Logger
	pages     map[string]*template.Template
	csrfKey   []byte
	cookieVal string
	static    http.Handler
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
	}
	cfg.PageSize = cmp.Or(cfg.PageSize, PageSizeDefault)
	s := &Server{cfg: cfg, repo: cfg.Repo, log: cfg.Logger, csrfKey: make([]byte, 32)}
	if s.repo == nil {
		s.repo = repo.New(nil)
	}
	if s.log == nil {
		s.log = slog.Default()
	}
	// A per-process secret: CSRF tokens and login cookies die with the
	// process, so a restart logs everyone out.
	if _, err := rand.Read(s.csrfKey); err != nil {
		return nil, fmt.Errorf("read a CSRF secret: %w", err)
	}
	if cfg.AuthToken != "" {
		s.cookieVal = s.mac("session", cfg.AuthToken)
	}
	var err error
	if s.pages, err = parsePages(); err != nil {
		return nil, err
	}
	css, _ := fs.Sub(staticFS, "static")
	s.static = http.StripPrefix("/static/", http.FileServerFS(css))
	return s, nil
}

func parsePages() (map[string]*template.Template, error) {
	pages := map[string]*template.Template{}
	for _, name := range []string{"overview", "attempts", "attempt", "confirm", "login", "error"} {
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
	mux.HandleFunc("GET /login", s.loginForm)
	mux.HandleFunc("POST /login", s.loginForm)
	mux.HandleFunc("POST /logout", s.logout)
	mux.Handle("GET /static/", s.static)
	return s.secure(mux)
}

// ListenIsLoopback says whether a --listen address only accepts
// connections from this host: a loopback IP or "localhost". An empty host
// (":8080") listens on every interface.
func ListenIsLoopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	return err == nil && host != "" && hostIsLoopback(host)
}

// Serve serves h on ln until ctx ends, then lets requests in flight end
// for up to 2 seconds and closes every connection.
func Serve(ctx context.Context, ln net.Listener, h http.Handler) error {
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second, ReadTimeout: 30 * time.Second, WriteTimeout: 60 * time.Second}
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
