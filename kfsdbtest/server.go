package kfsdbtest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net/netip"
	"net/url"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/api/types/network"
	"github.com/testcontainers/testcontainers-go"
	tcpostgres "github.com/testcontainers/testcontainers-go/modules/postgres"

	"github.com/knowledgefs/kfsdb/migrate"
	"github.com/knowledgefs/kfsdb/migrate/redact"
)

// Credentials of the container the kit starts: throwaway, published on
// 127.0.0.1 only where Docker is local, and redacted from errors anyway.
const (
	containerDatabase = "kfsdbtest"
	containerUser     = "kfsdbtest"
	containerPassword = "kfsdbtest-password"
)

// server is the PostgreSQL server of a test binary: a container the kit
// started or KFS_TEST_DATABASE_URL's server, with the migrated template
// every test database is cloned from.
type server struct {
	admin     *pgxpool.Pool
	adminURL  string
	container *tcpostgres.PostgresContainer
	template  string
	// createMu serializes CREATE DATABASE: PostgreSQL refuses to copy a
	// template another CREATE DATABASE is copying.
	createMu sync.Mutex
}

// startServer acquires the server (KFS_TEST_DATABASE_URL, else a container
// of KFS_TEST_POSTGRES_IMAGE) and creates the migrated template.
func startServer(ctx context.Context) (*server, error) {
	s := &server{}
	if u := os.Getenv(EnvDatabaseURL); u != "" {
		s.adminURL = u
	} else {
		image := os.Getenv(EnvImage)
		if image == "" {
			image = DefaultImage
		}
		if err := s.startContainer(ctx, image); err != nil {
			return nil, err
		}
	}
	admin, err := pgxpool.New(ctx, s.adminURL)
	if err == nil {
		err = admin.Ping(ctx)
	}
	if err != nil {
		s.close(ctx)
		return nil, fmt.Errorf("kfsdbtest: could not connect to %s: %w", redact.Text(s.adminURL), err)
	}
	s.admin = admin
	if err := s.createTemplate(ctx); err != nil {
		s.close(ctx)
		return nil, err
	}
	return s, nil
}

func (s *server) startContainer(ctx context.Context, image string) error {
	local := dockerIsLocal()
	if local && os.Getenv("TESTCONTAINERS_HOST_OVERRIDE") == "" {
		// testcontainers would otherwise guess the host (inside a container:
		// the default gateway), where a loopback-only port is not reachable.
		os.Setenv("TESTCONTAINERS_HOST_OVERRIDE", "127.0.0.1")
	}
	ctr, err := tcpostgres.Run(ctx, image,
		tcpostgres.WithDatabase(containerDatabase),
		tcpostgres.WithUsername(containerUser),
		tcpostgres.WithPassword(containerPassword),
		tcpostgres.BasicWaitStrategies(),
		// Test data need not survive a crash: no fsync, data in memory
		// (CREATE DATABASE ... TEMPLATE, once per test, is then fast).
		testcontainers.WithCmd("postgres", "-c", "fsync=off", "-c", "max_connections=200"),
		testcontainers.WithLabels(runLabels()),
		testcontainers.WithHostConfigModifier(func(hc *container.HostConfig) {
			hc.Tmpfs = map[string]string{"/var/lib/postgresql/data": "rw"}
			if local {
				hc.PortBindings = network.PortMap{
					network.MustParsePort("5432/tcp"): {{HostIP: netip.MustParseAddr("127.0.0.1"), HostPort: "0"}},
				}
			}
		}),
	)
	if err != nil {
		if ctr != nil {
			_ = testcontainers.TerminateContainer(ctr)
		}
		return fmt.Errorf("kfsdbtest: no PostgreSQL server: could not start a container from image %q: %w\n"+
			"Set %s to an existing server's URL (the kit creates and drops its own kfsdbtest_* databases there), "+
			"or make Docker reachable and set %s to an image it has or can pull (default %s); "+
			"where the Ryuk reaper image cannot be pulled set TESTCONTAINERS_RYUK_DISABLED=true",
			image, err, EnvDatabaseURL, EnvImage, DefaultImage)
	}
	s.container = ctr
	host := os.Getenv("TESTCONTAINERS_HOST_OVERRIDE")
	if host == "" {
		if host, err = ctr.Host(ctx); err != nil {
			return fmt.Errorf("kfsdbtest: container host: %w", err)
		}
	}
	port, err := ctr.MappedPort(ctx, "5432/tcp")
	if err != nil {
		return fmt.Errorf("kfsdbtest: container port: %w", err)
	}
	s.adminURL = (&url.URL{
		Scheme: "postgres", User: url.UserPassword(containerUser, containerPassword),
		Host: host + ":" + port.Port(), Path: "/" + containerDatabase, RawQuery: "sslmode=disable",
	}).String()
	return nil
}

// dockerIsLocal reports whether the Docker engine runs on this machine, so
// that published ports can be bound to, and reached on, 127.0.0.1.
func dockerIsLocal() bool {
	h := os.Getenv("DOCKER_HOST")
	return h == "" || strings.HasPrefix(h, "unix://") || strings.HasPrefix(h, "npipe://")
}

// createTemplate creates an empty database, runs kfsdb's migrations on it
// (the one call of migrate.Up in the kit) and forbids connections to it, so
// it can be copied by any number of CREATE DATABASE ... TEMPLATE.
func (s *server) createTemplate(ctx context.Context) error {
	name := randomName("kfsdbtest_tmpl")
	u, err := s.createDatabase(ctx, name, "template0")
	if err != nil {
		return err
	}
	s.template = name
	if _, err := migrate.Up(ctx, u); err != nil {
		return fmt.Errorf("kfsdbtest: could not migrate the template database: %s", redact.Text(err.Error()))
	}
	if _, err := s.admin.Exec(ctx, "ALTER DATABASE "+pgx.Identifier{name}.Sanitize()+" WITH ALLOW_CONNECTIONS false"); err != nil {
		return fmt.Errorf("kfsdbtest: could not lock the template database: %w", err)
	}
	return nil
}

// createDatabase creates database name as a copy of template and returns
// its URL. Names are the kit's own (randomName), never a caller's.
func (s *server) createDatabase(ctx context.Context, name, template string) (string, error) {
	s.createMu.Lock()
	defer s.createMu.Unlock()
	sql := "CREATE DATABASE " + pgx.Identifier{name}.Sanitize() + " TEMPLATE " + pgx.Identifier{template}.Sanitize()
	if _, err := s.admin.Exec(ctx, sql); err != nil {
		return "", fmt.Errorf("kfsdbtest: could not create database %s: %w", name, err)
	}
	return withDatabase(s.adminURL, name)
}

func (s *server) dropDatabase(ctx context.Context, name string) error {
	if _, err := s.admin.Exec(ctx, "DROP DATABASE IF EXISTS "+pgx.Identifier{name}.Sanitize()+" WITH (FORCE)"); err != nil {
		return fmt.Errorf("kfsdbtest: could not drop database %s: %w", name, err)
	}
	return nil
}

// close drops the template, closes the admin pool and removes the
// container the kit started. It reports the first error.
func (s *server) close(ctx context.Context) error {
	var errs []error
	if s.admin != nil {
		if s.template != "" {
			errs = append(errs, s.dropDatabase(ctx, s.template))
		}
		s.admin.Close()
	}
	if s.container != nil {
		if err := testcontainers.TerminateContainer(s.container); err != nil {
			errs = append(errs, fmt.Errorf("kfsdbtest: could not remove the PostgreSQL container: %w", err))
		}
	}
	return errors.Join(errs...)
}

// randomName returns prefix_<16 hex digits>, a valid database name.
func randomName(prefix string) string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return prefix + "_" + hex.EncodeToString(b[:])
}

// withDatabase returns the server URL (URL or keyword/value form) with its
// database set to name.
func withDatabase(dsn, name string) (string, error) {
	if u, err := url.Parse(dsn); err == nil && (u.Scheme == "postgres" || u.Scheme == "postgresql") {
		u.Path, u.RawPath = "/"+name, ""
		if q := u.Query(); q.Has("dbname") {
			q.Set("dbname", name)
			u.RawQuery = q.Encode()
		}
		return u.String(), nil
	}
	if _, err := pgx.ParseConfig(dsn); err != nil {
		return "", fmt.Errorf("kfsdbtest: %s is not a PostgreSQL URL: %w", redact.Text(dsn), err)
	}
	return strings.TrimSpace(dsn) + " dbname=" + name, nil // a later keyword wins
}

// connectTimeout bounds connecting a test database's pool.
const connectTimeout = 30 * time.Second

// runLabels is the container's LabelTestRun label, when EnvTestRun is set.
func runLabels() map[string]string {
	if run := os.Getenv(EnvTestRun); run != "" {
		return map[string]string{LabelTestRun: run}
	}
	return nil
}
