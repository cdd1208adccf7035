// Package pgtest provides PostgreSQL servers and throwaway databases for
// kfsdb's integration tests and for the programs beside them: the demo
// (tests/cmd/kfsdb-demo) and tests/cmd/kfsdb-bench.
//
// A server is acquired in this order:
//
//  1. KFS_TEST_DATABASE_URL: an existing server. pgtest connects to the
//     database in the URL only to create and drop its own databases
//     (named kfstest_*), and never touches anything else there.
//  2. Docker, through testcontainers-go's postgres module, running the image
//     named by KFS_TEST_POSTGRES_IMAGE (default [DefaultImage]). On machines
//     without registry access, build a local image first with
//     `make postgres-image` and set KFS_TEST_POSTGRES_IMAGE=kfsdb-postgres:17.
//
// If neither works, [StartServer] returns an error that explains both
// options. With a local Docker engine, container ports are published on
// 127.0.0.1 only, and TESTCONTAINERS_HOST_OVERRIDE defaults to 127.0.0.1. Set TESTCONTAINERS_RYUK_DISABLED=true where the Ryuk reaper image
// cannot be pulled; pgtest terminates its containers itself.
//
// Test packages call [Main] from TestMain: it starts one server per package
// and migrates one template database. Each test then calls [NewDB] for its
// own database, cloned from the template, so tests can run with t.Parallel().
// [NewEmptyDB] gives a database without migrations, for migration tests.
//
// Fault-injection tests call [MainWithOptions] with
// Options{PersistentData: true}: the container keeps its data on disk and
// a fixed loopback port, so [Server.Restart] loses nothing and pools
// reconnect by themselves; [Server.Pause] and [Server.Unpause] freeze and
// resume it. None of these work on a KFS_TEST_DATABASE_URL server
// ([Server.IsContainer] is false there).
//
// The non-testing API ([StartServer], [ConnectServer], [Server]) serves
// programs such as the demo with the same environment variables. Creating
// and dropping databases is the embedded [scratch.Server]'s (tests/scratch),
// which `kfsdb-bench bench` uses on its own.
package pgtest

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"sync"

	"github.com/jackc/pgx/v5"
	"github.com/testcontainers/testcontainers-go"
	tcpostgres "github.com/testcontainers/testcontainers-go/modules/postgres"

	"github.com/knowledgefs/kfsdb/migrate"
	"github.com/knowledgefs/kfsdb/migrate/redact"
	"github.com/knowledgefs/kfsdb/tests/scratch"
)

const (
	// DefaultImage is the Docker image started when KFS_TEST_POSTGRES_IMAGE
	// is unset: the official PostgreSQL 17 image.
	DefaultImage = "postgres:17-alpine"

	// EnvDatabaseURL names the environment variable holding the URL of an
	// existing server to use instead of a container.
	EnvDatabaseURL = "KFS_TEST_DATABASE_URL"

	// EnvImage names the environment variable holding the Docker image to run
	// when EnvDatabaseURL is unset. Defaults to [DefaultImage].
	EnvImage = "KFS_TEST_POSTGRES_IMAGE"
)

// Credentials of the containers pgtest starts. They are throwaway and only
// reachable on the loopback interface, but are still redacted from output.
const (
	containerDatabase = "kfsdb"
	containerPassword = "kfsdb-test-password"
	containerUser     = "kfsdb"
)

// Server is a PostgreSQL server on which pgtest creates and drops databases:
// either a container it started or an existing server it connected to. Its
// database methods (CreateDatabase, DropDatabase, DatabaseURL, AdminURL) are
// the embedded [scratch.Server]'s; for a container, the administration
// database is the container's default one.
//
// A Server is safe for concurrent use. CreateDatabase calls are serialized,
// because PostgreSQL refuses to copy a template that another CREATE DATABASE
// is using.
type Server struct {
	*scratch.Server
	closeErr   error
	closeOnce  sync.Once
	container  *tcpostgres.PostgresContainer
	network    *testcontainers.DockerNetwork // with Options.NetworkAlias
	alias      string
	desc       string
	hostPort   string // the fixed host port of a PersistentData container
	image      string
	persistent bool
	kept       bool
}

// Keep leaves a container pgtest started running after Close, for a
// person to look at what ran on it, and returns its id ("" for a server
// pgtest did not start, which Close never stops anyway).
func (s *Server) Keep() string {
	if s.container == nil {
		return ""
	}
	s.kept = true
	return s.container.GetContainerID()
}

// Options tune the server [StartServerWithOptions] and [MainWithOptions]
// acquire. The zero value is what [StartServer] and [Main] use.
type Options struct {
	// PersistentData keeps a container's data directory on the container's
	// own filesystem instead of tmpfs, and publishes PostgreSQL on a free
	// 127.0.0.1 port chosen up front instead of an ephemeral one, so that
	// [Server.Restart] keeps both the data and the URL. CREATE DATABASE is
	// slower there (about a second per test database on overlay storage).
	// It has no effect on a KFS_TEST_DATABASE_URL server, which cannot be
	// restarted or paused at all. Defaults to false: tmpfs, ephemeral port.
	PersistentData bool
	// Durable runs a container as the benchmarks' figures need it: fsync
	// on, and the data directory on the image's VOLUME (a Docker volume,
	// removed with the container) instead of tmpfs. It has no effect on a
	// KFS_TEST_DATABASE_URL server. Defaults to false: fsync off, tmpfs.
	Durable bool
	// NetworkAlias, when set, starts a container on a Docker network of its
	// own, created for it, where other containers reach PostgreSQL as
	// NetworkAlias:5432 ([Server.Network], [Server.NetworkURL]); the test
	// still reaches it through 127.0.0.1. Close removes the network after
	// the container. It has no effect on a KFS_TEST_DATABASE_URL server.
	// Defaults to "": the default bridge only.
	NetworkAlias string
}

// StartServer acquires a server as the package documentation describes:
// KFS_TEST_DATABASE_URL if set, otherwise a container running
// KFS_TEST_POSTGRES_IMAGE (default [DefaultImage]). The caller must Close it.
func StartServer(ctx context.Context) (*Server, error) {
	return StartServerWithOptions(ctx, Options{})
}

// StartServerWithOptions is [StartServer] with options.
func StartServerWithOptions(ctx context.Context, opts Options) (*Server, error) {
	if u := os.Getenv(EnvDatabaseURL); u != "" {
		s, err := ConnectServer(ctx, u)
		if err != nil {
			return nil, fmt.Errorf("could not use %s=%s: %w", EnvDatabaseURL, redact.Text(u), err)
		}
		return s, nil
	}
	image := os.Getenv(EnvImage)
	if image == "" {
		image = DefaultImage
	}
	return startContainer(ctx, image, opts)
}

// ConnectServer uses the existing server at adminURL. The database in
// adminURL is used only to run CREATE DATABASE and DROP DATABASE. Close
// closes the connections and leaves the server running.
func ConnectServer(ctx context.Context, adminURL string) (*Server, error) {
	a, err := scratch.Connect(ctx, adminURL)
	if err != nil {
		return nil, err
	}
	return &Server{Server: a, desc: a.Description()}, nil
}

// Close drops nothing, closes the admin connections and, if the server is a
// container pgtest started, terminates and removes it. It is safe to call
// more than once.
func (s *Server) Close() error {
	s.closeOnce.Do(func() {
		s.Server.Close()
		if s.container != nil && !s.kept {
			s.closeErr = testcontainers.TerminateContainer(s.container)
			if s.closeErr != nil {
				s.closeErr = fmt.Errorf("could not terminate PostgreSQL container: %w", s.closeErr)
			}
		}
		if s.network != nil && !s.kept {
			if err := s.network.Remove(context.Background()); err != nil {
				s.closeErr = errors.Join(s.closeErr, fmt.Errorf("could not remove the server's network: %w", err))
			}
		}
	})
	return s.closeErr
}

// Description says which server this is (container and image, or host and
// port) and its PostgreSQL version, without credentials.
func (s *Server) Description() string { return s.desc }

// Image returns the Docker image of a container server, or "" for an
// existing server.
func (s *Server) Image() string { return s.image }

// CreateTemplate creates database name, applies every migration of
// migrations.FS to it and then forbids connections to it, so that it can be
// the template of any number of CREATE DATABASE calls.
func (s *Server) CreateTemplate(ctx context.Context, name string) error {
	u, err := s.CreateDatabase(ctx, name, "")
	if err != nil {
		return err
	}
	if _, err := migrate.Up(ctx, u); err != nil {
		_ = s.DropDatabase(context.WithoutCancel(ctx), name)
		return fmt.Errorf("could not migrate template database %q: %w", name, err)
	}
	// migrate.Up closed its connections. Forbidding new ones keeps the
	// template free of sessions.
	if _, err := s.Admin().Exec(ctx, "ALTER DATABASE "+pgx.Identifier{name}.Sanitize()+" WITH ALLOW_CONNECTIONS false"); err != nil {
		_ = s.DropDatabase(context.WithoutCancel(ctx), name)
		return fmt.Errorf("could not lock template database %q: %w", name, err)
	}
	return nil
}

// ErrNotControllable is returned by [Server.Restart], [Server.Pause] and
// [Server.Unpause] for a server pgtest did not start (KFS_TEST_DATABASE_URL),
// and by Restart for a container whose data is on tmpfs (see
// [Options.PersistentData]).
var ErrNotControllable = errors.New("pgtest: server cannot be restarted or paused")

// Network returns the name of the Docker network of a server started with
// [Options.NetworkAlias], or "".
func (s *Server) Network() string {
	if s.network == nil {
		return ""
	}
	return s.network.Name
}

// NetworkURL returns dbURL (one of this server's database URLs) as a
// container on [Server.Network] reaches it: at NetworkAlias:5432. It
// returns "" for a server without a network.
func (s *Server) NetworkURL(dbURL string) string {
	if s.network == nil {
		return ""
	}
	u, err := url.Parse(dbURL)
	if err != nil {
		return ""
	}
	u.Host = s.alias + ":5432"
	return u.String()
}

// IsContainer reports whether the server is a container pgtest started, so
// that [Server.Pause] works, and [Server.Restart] too when it was started
// with [Options.PersistentData].
func (s *Server) IsContainer() bool { return s.container != nil }
