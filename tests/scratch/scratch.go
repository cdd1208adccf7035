// Package scratch creates and drops throwaway databases on an existing
// PostgreSQL server: the test harness (tests/pgtest) builds its servers on
// [Server], adding the containers it starts, and `kfsdb-bench bench`
// (bench/kfsdb-bench) runs in one on the server it is given. It imports
// pgx and redact only, so a binary can link it without the harness. Database names are checked against ^[a-z_][a-z0-9_]{0,62}$
// before they go into SQL.
package scratch

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net/url"
	"regexp"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/knowledgefs/kfsdb/migrate/redact"
)

// Admin pool settings: a few connections, and a bound on connecting.
const (
	adminMaxConns       = 4
	adminConnectTimeout = 30 * time.Second
)

// nameRe is what scratch accepts as a database name: names are interpolated
// into CREATE DATABASE and DROP DATABASE, so they are checked first.
var nameRe = regexp.MustCompile(`^[a-z_][a-z0-9_]{0,62}$`)

// Server is a connection to a PostgreSQL server's administration database,
// on which it creates and drops databases.
//
// A Server is safe for concurrent use. CreateDatabase calls are serialized,
// because PostgreSQL refuses to copy a template that another CREATE
// DATABASE is using.
type Server struct {
	admin    *pgxpool.Pool
	adminURL string
	createMu sync.Mutex
	version  string
}

// Connect connects to the database in adminURL (URL or keyword/value form)
// with a small pool and reads the server's version. That database is used
// only to administer others; Close closes the pool and leaves the server
// running. Errors name adminURL without its password.
func Connect(ctx context.Context, adminURL string) (*Server, error) {
	cfg, err := pgxpool.ParseConfig(adminURL)
	if err != nil {
		return nil, fmt.Errorf("could not parse server URL %s: %w", redact.Text(adminURL), err)
	}
	cfg.MaxConns = adminMaxConns
	cctx, cancel := context.WithTimeout(ctx, adminConnectTimeout)
	defer cancel()
	pool, err := pgxpool.NewWithConfig(cctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("could not connect to %s: %w", redact.Text(adminURL), err)
	}
	s := &Server{admin: pool, adminURL: adminURL}
	if err := pool.QueryRow(cctx, "SHOW server_version").Scan(&s.version); err != nil {
		pool.Close()
		return nil, fmt.Errorf("could not connect to %s: %w", redact.Text(adminURL), err)
	}
	return s, nil
}

// Admin returns the pool on the administration database, for statements
// Server has no method for. Close closes it.
func (s *Server) Admin() *pgxpool.Pool { return s.admin }

// AdminURL returns the URL Connect was given. It holds the password: pass
// it through redact.Text before printing it.
func (s *Server) AdminURL() string { return s.adminURL }

// Close closes the administration pool. The server and its databases stay.
func (s *Server) Close() { s.admin.Close() }

// CreateDatabase creates database name, copied from template when template
// is not empty, and returns its URL. Names must match ^[a-z_][a-z0-9_]*$ (at
// most 63 characters). Calls are serialized: PostgreSQL refuses to copy a
// template that another session, including another CREATE DATABASE, uses.
func (s *Server) CreateDatabase(ctx context.Context, name, template string) (string, error) {
	if !nameRe.MatchString(name) {
		return "", fmt.Errorf("could not create database %q: invalid name", name)
	}
	sql := "CREATE DATABASE " + pgx.Identifier{name}.Sanitize()
	if template != "" {
		if !nameRe.MatchString(template) {
			return "", fmt.Errorf("could not create database %q: invalid template name %q", name, template)
		}
		sql += " TEMPLATE " + pgx.Identifier{template}.Sanitize()
	}
	s.createMu.Lock()
	defer s.createMu.Unlock()
	if _, err := s.admin.Exec(ctx, sql); err != nil {
		return "", fmt.Errorf("could not create database %q: %w", name, err)
	}
	return s.DatabaseURL(name), nil
}

// DatabaseURL returns the URL of database name on this server (the admin URL
// with its database replaced). Like AdminURL it holds the password.
func (s *Server) DatabaseURL(name string) string {
	return withDatabase(s.adminURL, name)
}

// Description says which server this is, host and port, and its PostgreSQL
// version, without credentials: "existing server HOST:PORT (PostgreSQL V)".
func (s *Server) Description() string {
	cfg := s.admin.Config().ConnConfig
	return fmt.Sprintf("existing server %s:%d (PostgreSQL %s)", cfg.Host, cfg.Port, s.version)
}

// DropDatabase drops database name if it exists, terminating its sessions
// (DROP DATABASE ... WITH (FORCE)).
func (s *Server) DropDatabase(ctx context.Context, name string) error {
	if !nameRe.MatchString(name) {
		return fmt.Errorf("could not drop database %q: invalid name", name)
	}
	if _, err := s.admin.Exec(ctx, "DROP DATABASE IF EXISTS "+pgx.Identifier{name}.Sanitize()+" WITH (FORCE)"); err != nil {
		return fmt.Errorf("could not drop database %q: %w", name, err)
	}
	return nil
}

// Version returns the server's version (SHOW server_version).
func (s *Server) Version() string { return s.version }

// RandomName returns prefix followed by "_" and 16 random hex digits, a valid
// database name when prefix is one.
func RandomName(prefix string) string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return prefix + "_" + hex.EncodeToString(b[:])
}

// withDatabase returns dsn (URL or keyword/value form) with its database set
// to name.
func withDatabase(dsn, name string) string {
	if u, err := url.Parse(dsn); err == nil && (u.Scheme == "postgres" || u.Scheme == "postgresql") {
		u.Path = "/" + name
		u.RawPath = ""
		q := u.Query()
		if q.Has("dbname") {
			q.Set("dbname", name)
			u.RawQuery = q.Encode()
		}
		return u.String()
	}
	// keyword/value form: a later keyword wins.
	return strings.TrimSpace(dsn) + " dbname=" + name
}
