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
// and dropping databases is the embedded [scratch.Server]'s, which the
// deploy binary uses on its own for `kfsdb bench`.
package pgtest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/jackc/pgx/v5"
	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/api/types/network"
	"github.com/moby/moby/client"
	"github.com/testcontainers/testcontainers-go"
	tcpostgres "github.com/testcontainers/testcontainers-go/modules/postgres"

	"github.com/knowledgefs/kfsdb/cmd/kfsdb/migrate"
	"github.com/knowledgefs/kfsdb/cmd/kfsdb/redact"
	"github.com/knowledgefs/kfsdb/cmd/kfsdb/scratch"
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
	desc       string
	hostPort   string // the fixed host port of a PersistentData container
	image      string
	persistent bool
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

func startContainer(ctx context.Context, image string, sopts Options) (*Server, error) {
	present, err := checkDocker(ctx, image)
	if err != nil {
		return nil, err
	}
	local := dockerIsLocal()
	hostPort := "0"
	if sopts.PersistentData {
		if !local {
			return nil, errors.New("pgtest: PersistentData needs a local Docker engine (a fixed loopback port is chosen on this machine)")
		}
		if hostPort, err = freeLoopbackPort(); err != nil {
			return nil, fmt.Errorf("pgtest: could not choose a port for the container: %w", err)
		}
	}

	opts := []testcontainers.ContainerCustomizer{
		tcpostgres.WithDatabase(containerDatabase),
		tcpostgres.WithUsername(containerUser),
		tcpostgres.WithPassword(containerPassword),
		tcpostgres.BasicWaitStrategies(),
		// fsync off: test data need not survive a crash, and it is faster.
		testcontainers.WithCmd("postgres", "-c", "fsync=off", "-c", "max_connections=200"),
	}
	if local && os.Getenv("TESTCONTAINERS_HOST_OVERRIDE") == "" {
		// testcontainers would otherwise guess the host (inside a container:
		// the default gateway), where the loopback-only port is not reachable.
		os.Setenv("TESTCONTAINERS_HOST_OVERRIDE", "127.0.0.1")
	}
	// One modifier: a second WithHostConfigModifier would replace the first.
	opts = append(opts, testcontainers.WithHostConfigModifier(func(hc *container.HostConfig) {
		// The data directory in memory: on overlay storage drivers every
		// CREATE DATABASE ... TEMPLATE (one per test) costs over a second;
		// on tmpfs it is under 0.1 s. A tmpfs is emptied when the container
		// stops, so servers that are restarted keep their data on disk.
		if !sopts.PersistentData {
			hc.Tmpfs = map[string]string{"/var/lib/postgresql/data": "rw"}
		}
		if local {
			// Publish the port on the loopback interface only; a fixed one
			// for PersistentData, so a restart keeps the URL.
			hc.PortBindings = network.PortMap{
				network.MustParsePort("5432/tcp"): {{HostIP: netip.MustParseAddr("127.0.0.1"), HostPort: hostPort}},
			}
		}
	}))

	ctr, err := tcpostgres.Run(ctx, image, opts...)
	if err != nil {
		if ctr != nil {
			_ = testcontainers.TerminateContainer(ctr)
		}
		err = fmt.Errorf("could not start PostgreSQL container from image %q: %w", image, err)
		if strings.Contains(strings.ToLower(err.Error()), "ryuk") {
			return nil, fmt.Errorf("%w\n(the Ryuk reaper could not start: set TESTCONTAINERS_RYUK_DISABLED=true)", err)
		}
		if !present {
			return nil, noServerError(fmt.Errorf("image %q is not present locally and could not be pulled: %w", image, err))
		}
		return nil, err
	}

	host := os.Getenv("TESTCONTAINERS_HOST_OVERRIDE")
	if host == "" && local {
		host = "127.0.0.1"
	}
	if host == "" {
		if host, err = ctr.Host(ctx); err != nil {
			_ = testcontainers.TerminateContainer(ctr)
			return nil, fmt.Errorf("could not get host of PostgreSQL container: %w", err)
		}
	}
	port, err := ctr.MappedPort(ctx, "5432/tcp")
	if err != nil {
		_ = testcontainers.TerminateContainer(ctr)
		return nil, fmt.Errorf("could not get mapped port of PostgreSQL container: %w", err)
	}
	u := url.URL{
		Scheme:   "postgres",
		User:     url.UserPassword(containerUser, containerPassword),
		Host:     host + ":" + port.Port(),
		Path:     "/" + containerDatabase,
		RawQuery: "sslmode=disable",
	}

	a, err := scratch.Connect(ctx, u.String())
	if err != nil {
		_ = testcontainers.TerminateContainer(ctr)
		return nil, err
	}
	s := &Server{Server: a, container: ctr, image: image, persistent: sopts.PersistentData}
	if sopts.PersistentData {
		s.hostPort = port.Port()
	}
	id := ctr.GetContainerID()
	if len(id) > 12 {
		id = id[:12]
	}
	s.desc = fmt.Sprintf("container %s from image %s (PostgreSQL %s) on %s:%s", id, image, a.Version(), host, port.Port())
	return s, nil
}

// freeLoopbackPort returns a TCP port that is free on 127.0.0.1 right now.
func freeLoopbackPort() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer l.Close()
	return strconv.Itoa(l.Addr().(*net.TCPAddr).Port), nil
}

// dockerIsLocal reports whether the Docker engine runs on this machine, so
// that published ports can be bound to, and reached on, 127.0.0.1.
func dockerIsLocal() bool {
	h := os.Getenv("DOCKER_HOST")
	return h == "" || strings.HasPrefix(h, "unix://") || strings.HasPrefix(h, "npipe://")
}

// checkDocker turns "no Docker" and "no image" into errors that say what to
// do, instead of a pull timeout deep inside testcontainers. It reports
// whether image is present locally; a missing image other than
// kfsdb-postgres:N is left to testcontainers to pull.
func checkDocker(ctx context.Context, image string) (present bool, err error) {
	provider, err := testcontainers.NewDockerProvider()
	if err != nil {
		return false, noServerError(fmt.Errorf("docker is not reachable: %w", err))
	}
	defer provider.Close()
	hctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	if err := provider.Health(hctx); err != nil {
		return false, noServerError(fmt.Errorf("docker is not reachable: %w", err))
	}
	if _, err := provider.Client().ImageInspect(hctx, image); err != nil {
		if !cerrdefs.IsNotFound(err) {
			return false, fmt.Errorf("could not inspect image %q: %w", image, err)
		}
		if strings.HasPrefix(image, "kfsdb-postgres:") {
			// Locally built images cannot be pulled from anywhere.
			return false, noServerError(fmt.Errorf("image %q is not present locally; build it with `make postgres-image PG_MAJOR=%s`",
				image, strings.TrimPrefix(image, "kfsdb-postgres:")))
		}
		return false, nil
	}
	return true, nil
}

func noServerError(cause error) error {
	return fmt.Errorf("pgtest: no PostgreSQL server available: %w\n"+
		"Either:\n"+
		"  - set %s to an existing server's URL (pgtest creates and drops its own kfstest_* databases there), or\n"+
		"  - make Docker reachable and set %s to a local image (default %s); without registry access run `make postgres-image` and use kfsdb-postgres:17",
		cause, EnvDatabaseURL, EnvImage, DefaultImage)
}

// Close drops nothing, closes the admin connections and, if the server is a
// container pgtest started, terminates and removes it. It is safe to call
// more than once.
func (s *Server) Close() error {
	s.closeOnce.Do(func() {
		s.Server.Close()
		if s.container != nil {
			s.closeErr = testcontainers.TerminateContainer(s.container)
			if s.closeErr != nil {
				s.closeErr = fmt.Errorf("could not terminate PostgreSQL container: %w", s.closeErr)
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

// IsContainer reports whether the server is a container pgtest started, so
// that [Server.Pause] works, and [Server.Restart] too when it was started
// with [Options.PersistentData].
func (s *Server) IsContainer() bool { return s.container != nil }

// Restart stops the container (PostgreSQL's fast shutdown, killed after
// 10 s), starts it again and waits until it accepts connections. The data
// directory and the host port survive, so URLs and pools stay valid: pools
// replace their broken connections by themselves. It needs a container
// started with [Options.PersistentData]; otherwise it returns
// [ErrNotControllable].
func (s *Server) Restart(ctx context.Context) error {
	if s.container == nil || !s.persistent {
		return fmt.Errorf("%w: Restart needs a container started with PersistentData", ErrNotControllable)
	}
	timeout := 10 * time.Second
	if err := s.container.Stop(ctx, &timeout); err != nil {
		return fmt.Errorf("pgtest: could not stop the container: %w", err)
	}
	return s.startAgain(ctx)
}

// startAgain starts the stopped container on its old host port and waits
// until PostgreSQL accepts connections.
func (s *Server) startAgain(ctx context.Context) error {
	if err := s.container.Start(ctx); err != nil {
		return fmt.Errorf("pgtest: could not start the container again: %w", err)
	}
	port, err := s.container.MappedPort(ctx, "5432/tcp")
	if err != nil {
		return fmt.Errorf("pgtest: could not get the mapped port after the restart: %w", err)
	}
	if port.Port() != s.hostPort {
		return fmt.Errorf("pgtest: the container came back on port %s, not %s", port.Port(), s.hostPort)
	}
	return s.WaitReady(ctx, time.Minute)
}

// Crash kills the container's processes at once (SIGKILL, no shutdown
// checkpoint, WAL buffers lost), starts it again and waits until
// PostgreSQL has run crash recovery and accepts connections. Like Restart
// it needs a container started with [Options.PersistentData].
func (s *Server) Crash(ctx context.Context) error {
	if s.container == nil || !s.persistent {
		return fmt.Errorf("%w: Crash needs a container started with PersistentData", ErrNotControllable)
	}
	err := s.dockerDo(ctx, "kill", func(c client.APIClient, id string) error {
		_, err := c.ContainerKill(ctx, id, client.ContainerKillOptions{Signal: "KILL"})
		return err
	})
	if err != nil {
		return err
	}
	return s.startAgain(ctx)
}

// WaitReady polls the server with SELECT 1 until it answers or timeout
// passes (the container's readiness check may pass on a restarted
// container's old log lines before PostgreSQL accepts connections).
func (s *Server) WaitReady(ctx context.Context, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	for {
		qctx, qcancel := context.WithTimeout(ctx, 2*time.Second)
		_, err := s.Admin().Exec(qctx, "SELECT 1")
		qcancel()
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("pgtest: server not ready after %s: %w", timeout, err)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// Pause freezes every process of the container (docker pause): connections
// stay open but nothing answers until [Server.Unpause]. It returns
// [ErrNotControllable] for a server pgtest did not start.
func (s *Server) Pause(ctx context.Context) error {
	return s.dockerDo(ctx, "pause", func(c client.APIClient, id string) error {
		_, err := c.ContainerPause(ctx, id, client.ContainerPauseOptions{})
		return err
	})
}

// Unpause resumes a container frozen by [Server.Pause].
func (s *Server) Unpause(ctx context.Context) error {
	return s.dockerDo(ctx, "unpause", func(c client.APIClient, id string) error {
		_, err := c.ContainerUnpause(ctx, id, client.ContainerUnpauseOptions{})
		return err
	})
}

func (s *Server) dockerDo(ctx context.Context, verb string, do func(client.APIClient, string) error) error {
	if s.container == nil {
		return fmt.Errorf("%w: %s needs a container", ErrNotControllable, verb)
	}
	provider, err := testcontainers.NewDockerProvider()
	if err != nil {
		return fmt.Errorf("pgtest: could not %s the container: %w", verb, err)
	}
	defer provider.Close()
	if err := do(provider.Client(), s.container.GetContainerID()); err != nil {
		return fmt.Errorf("pgtest: could not %s the container: %w", verb, err)
	}
	return nil
}

// errNoServer is returned by package-level helpers used outside [Main].
var errNoServer = errors.New("pgtest: no server; call pgtest.Main(m) from TestMain")
