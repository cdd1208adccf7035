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
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/api/types/network"
	"github.com/testcontainers/testcontainers-go"
	tcpostgres "github.com/testcontainers/testcontainers-go/modules/postgres"
	tcnetwork "github.com/testcontainers/testcontainers-go/network"

	"github.com/knowledgefs/kfsdb/tests/scratch"
)

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
		if hostPort, err = FreeLoopbackPort(); err != nil {
			return nil, fmt.Errorf("pgtest: could not choose a port for the container: %w", err)
		}
	}
	if local && os.Getenv("TESTCONTAINERS_HOST_OVERRIDE") == "" {
		// testcontainers would otherwise guess the host (inside a container:
		// the default gateway), where the loopback-only port is not reachable.
		os.Setenv("TESTCONTAINERS_HOST_OVERRIDE", "127.0.0.1")
	}
	opts := containerOptions(sopts, local, hostPort)
	var nw *testcontainers.DockerNetwork
	if sopts.NetworkAlias != "" {
		if nw, err = tcnetwork.New(ctx); err != nil {
			return nil, fmt.Errorf("could not create a Docker network for the PostgreSQL container: %w", err)
		}
		opts = append(opts, tcnetwork.WithNetwork([]string{sopts.NetworkAlias}, nw))
	}
	removeNetwork := func() {
		if nw != nil {
			_ = nw.Remove(context.WithoutCancel(ctx))
		}
	}
	ctr, err := tcpostgres.Run(ctx, image, opts...)
	if err != nil {
		if ctr != nil {
			_ = testcontainers.TerminateContainer(ctr)
		}
		removeNetwork()
		err = fmt.Errorf("could not start PostgreSQL container from image %q: %w", image, err)
		if strings.Contains(strings.ToLower(err.Error()), "ryuk") {
			return nil, fmt.Errorf("%w\n(the Ryuk reaper could not start: set TESTCONTAINERS_RYUK_DISABLED=true)", err)
		}
		if !present {
			return nil, noServerError(fmt.Errorf("image %q is not present locally and could not be pulled: %w", image, err))
		}
		return nil, err
	}
	s, err := connectContainer(ctx, ctr, image, sopts, local)
	if err != nil {
		_ = testcontainers.TerminateContainer(ctr)
		removeNetwork()
		return nil, err
	}
	s.network, s.alias = nw, sopts.NetworkAlias
	return s, nil
}

// containerOptions configures the postgres container: the test
// credentials, fsync off, data on tmpfs unless it must survive a restart
// or be durable, and the port published on loopback only (at hostPort;
// "0" picks one).
func containerOptions(sopts Options, local bool, hostPort string) []testcontainers.ContainerCustomizer {
	cmd := []string{"postgres", "-c", "max_connections=200"}
	if !sopts.Durable {
		// fsync off: test data need not survive a crash, and it is faster.
		cmd = append(cmd, "-c", "fsync=off")
	}
	opts := []testcontainers.ContainerCustomizer{
		tcpostgres.WithDatabase(containerDatabase),
		tcpostgres.WithUsername(containerUser),
		tcpostgres.WithPassword(containerPassword),
		tcpostgres.BasicWaitStrategies(),
		testcontainers.WithCmd(cmd...),
		RunLabels(),
	}
	// One modifier: a second WithHostConfigModifier would replace the first.
	return append(opts, testcontainers.WithHostConfigModifier(func(hc *container.HostConfig) {
		// The data directory in memory: on overlay storage drivers every
		// CREATE DATABASE ... TEMPLATE (one per test) costs over a second;
		// on tmpfs it is under 0.1 s. A tmpfs is emptied when the container
		// stops, so servers that are restarted keep their data on disk, and
		// durable ones on the image's VOLUME (a Docker volume).
		if !sopts.PersistentData && !sopts.Durable {
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
}

// connectContainer connects to a started container through its mapped
// port and describes it.
func connectContainer(ctx context.Context, ctr *tcpostgres.PostgresContainer, image string, sopts Options, local bool) (*Server, error) {
	host := os.Getenv("TESTCONTAINERS_HOST_OVERRIDE")
	if host == "" && local {
		host = "127.0.0.1"
	}
	var err error
	if host == "" {
		if host, err = ctr.Host(ctx); err != nil {
			return nil, fmt.Errorf("could not get host of PostgreSQL container: %w", err)
		}
	}
	port, err := ctr.MappedPort(ctx, "5432/tcp")
	if err != nil {
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

// FreeLoopbackPort returns a TCP port that is free on 127.0.0.1 right now
// (tests/hacluster publishes its nodes on such ports, so a restarted node
// keeps its address).
func FreeLoopbackPort() (string, error) {
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

// EnvTestRun names the run a container belongs to (.ci/run sets it): every
// container the tests create carries it as the label LabelTestRun, so a run's
// leftover check counts its own containers, not those of another run on the
// same engine.
const (
	EnvTestRun   = "KFS_TEST_RUN"
	LabelTestRun = "kfsdb.test-run"
)

// RunLabels labels a container with the run in KFS_TEST_RUN (no label when
// it is unset). Every container a test package creates takes it.
func RunLabels() testcontainers.CustomizeRequestOption {
	run := os.Getenv(EnvTestRun)
	if run == "" {
		return func(*testcontainers.GenericContainerRequest) error { return nil }
	}
	return testcontainers.WithLabels(map[string]string{LabelTestRun: run})
}
