// Package hacluster runs a PostgreSQL cluster with automatic failover for
// kfsdb's failover tests: pg_auto_failover's monitor, a primary and a
// standby, each `pg_autoctl ... --run` as user postgres in a container of
// the kfsdb-pgaf:N image (`make pgaf-image`), on a Docker network the
// cluster creates and removes. Each node's PostgreSQL is published on a
// fixed 127.0.0.1 port chosen up front, so a node killed and started again
// keeps its address, and [Cluster.URL] is the multi-host URL an
// application would use (target_session_attrs=read-write: the driver tries
// the hosts in order and keeps the one that accepts writes).
//
// The test never promotes anything: it kills the primary's container
// ([Cluster.KillPrimary], SIGKILL, no shutdown), pg_auto_failover's monitor
// notices and promotes the standby ([Cluster.WaitPrimary]), and a node
// started again ([Cluster.StartNode]) rejoins as a standby after pg_autoctl
// rewinds it. The monitor's timeouts are cut from tens of seconds to about
// one (see [MonitorSettings]), so a failover takes seconds.
//
// Trust authentication inside the private network, no SSL: the cluster is
// throwaway and reachable only on loopback.
package hacluster

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"strings"
	"sync"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/testcontainers/testcontainers-go"
	"github.com/testcontainers/testcontainers-go/network"

	"github.com/knowledgefs/kfsdb/migrate"
)

const (
	// DefaultImage is the image Start runs when Options.Image and
	// EnvImage are empty.
	DefaultImage = "kfsdb-pgaf:17"
	// EnvImage names the environment variable that picks the image
	// (kfsdb-pgaf:15 for PostgreSQL 15).
	EnvImage = "KFS_TEST_PGAF_IMAGE"
	// Database is the application database: pg_autoctl creates it on the
	// first primary, Start migrates it, replication carries it.
	Database = "kfsdb"
	// User is the role the application connects as (trusted from the
	// cluster's network, which the published ports come from).
	User = "postgres"
)

// ErrImageMissing: the pgaf image is not present locally (it cannot be
// pulled from anywhere; `make pgaf-image` builds it).
var ErrImageMissing = errors.New("hacluster: image missing")

// MonitorSettings are the monitor's timeouts (milliseconds; the defaults
// are in parentheses). A node is unhealthy once its keeper has not
// reported for node_considered_unhealthy_timeout (20000) and the monitor's
// health check has failed: checks every health_check_period (5000), each
// bounded by health_check_timeout (5000), health_check_max_retries (2)
// retries health_check_retry_delay (2000) apart. The standby is then
// promoted after primary_demote_timeout (30000), the time the old primary
// is given to demote itself: it must stay above the keepers'
// network_partition_timeout (KeeperNetworkPartitionTimeout), after which a
// primary that lost the monitor and its standby stops taking writes.
var MonitorSettings = [][2]string{
	{"pgautofailover.health_check_period", "1000"},
	{"pgautofailover.health_check_timeout", "1000"},
	{"pgautofailover.health_check_max_retries", "1"},
	{"pgautofailover.health_check_retry_delay", "500"},
	{"pgautofailover.node_considered_unhealthy_timeout", "3000"},
	{"pgautofailover.primary_demote_timeout", "5000"},
}

// KeeperNetworkPartitionTimeout is each keeper's
// timeout.network_partition_timeout in seconds (default 20), kept below
// the monitor's primary_demote_timeout.
const KeeperNetworkPartitionTimeout = "3"

// Options configure Start.
type Options struct {
	// Image: the pgaf image (default EnvImage, then DefaultImage).
	Image string
	// Sync: the standby is synchronous (pg_auto_failover's default,
	// replication-quorum true): a commit returns once the standby has it.
	// Otherwise both nodes join with replication-quorum false and the
	// primary never waits for its standby.
	Sync bool
	// Logf, when set, receives progress lines (t.Logf).
	Logf func(format string, args ...any)
}

// Cluster is a running monitor, primary and standby.
type Cluster struct {
	opts    Options
	net     *testcontainers.DockerNetwork
	monitor *testcontainers.DockerContainer
	nodes   []*node
	closeMu sync.Mutex
	closed  bool
}

// node is one keeper and its PostgreSQL.
type node struct {
	name     string // hostname on the cluster network and pg_autoctl's node name
	hostPort string // its PostgreSQL on 127.0.0.1
	ctr      *testcontainers.DockerContainer
}

// pgdata is a directory inside the image's VOLUME, not the volume itself:
// pg_autoctl builds a standby's data directory beside it and renames it
// into place, which a mount point refuses.
const pgdata = "/var/lib/postgresql/data/pgaf"

// Timeouts of Start's waits: generous, the machine is shared.
const (
	monitorStartTimeout = 2 * time.Minute
	clusterStartTimeout = 4 * time.Minute
)

// Start runs a monitor, then node1 (the first primary), then node2 (its
// standby), waits until the monitor reports them primary and secondary,
// and migrates Database. The caller must Close the cluster, also after an
// error (Close removes whatever was created).
func Start(ctx context.Context, opts Options) (*Cluster, error) {
	if opts.Image == "" {
		opts.Image = os.Getenv(EnvImage)
	}
	if opts.Image == "" {
		opts.Image = DefaultImage
	}
	if opts.Logf == nil {
		opts.Logf = func(string, ...any) {}
	}
	if err := checkImage(ctx, opts.Image); err != nil {
		return nil, err
	}
	if os.Getenv("TESTCONTAINERS_HOST_OVERRIDE") == "" {
		// As in pgtest: the ports are published on loopback only.
		os.Setenv("TESTCONTAINERS_HOST_OVERRIDE", "127.0.0.1")
	}
	c := &Cluster{opts: opts}
	err := c.start(ctx)
	if err != nil {
		err = fmt.Errorf("%w\n%s", err, c.Logs(context.WithoutCancel(ctx), 40))
	}
	return c, err
}

func (c *Cluster) start(ctx context.Context) error {
	t0 := time.Now()
	nw, err := network.New(ctx)
	if err != nil {
		return fmt.Errorf("hacluster: could not create the network: %w", err)
	}
	c.net = nw
	if err := c.startMonitor(ctx); err != nil {
		return err
	}
	for i, name := range []string{"node1", "node2"} {
		n, err := c.startNode(ctx, name)
		if n != nil {
			c.nodes = append(c.nodes, n)
		}
		if err != nil {
			return err
		}
		if i == 0 {
			if err := c.prepareFirstPrimary(ctx, n); err != nil {
				return err
			}
		}
	}
	if err := c.WaitHealthy(ctx, clusterStartTimeout); err != nil {
		return err
	}
	if err := c.checkReplicationMode(ctx); err != nil {
		return err
	}
	for _, n := range c.nodes {
		if _, err := c.exec(ctx, n.ctr, "pg_autoctl", "config", "set", "--pgdata", pgdata,
			"timeout.network_partition_timeout", KeeperNetworkPartitionTimeout); err != nil {
			return err
		}
	}
	if _, err := migrate.Up(ctx, c.URL(Database)); err != nil {
		return fmt.Errorf("hacluster: could not migrate %s: %w", Database, err)
	}
	c.opts.Logf("hacluster: %s ready in %s (sync=%v, monitor, %s)", c.opts.Image, time.Since(t0).Round(time.Millisecond), c.opts.Sync, c.describeNodes())
	return nil
}

// prepareFirstPrimary waits until node1 runs alone as "single", then makes
// its checkpoints immediate (checkpoint_completion_target 0): the standby's
// pg_basebackup waits for a checkpoint, which otherwise spreads over
// minutes on an idle server. ALTER SYSTEM's file travels with the base
// backup, so the standby has it too.
func (c *Cluster) prepareFirstPrimary(ctx context.Context, n *node) error {
	err := c.waitState(ctx, clusterStartTimeout, "node1 single", func(states []NodeState) bool {
		return len(states) == 1 && states[0].Name == n.name && states[0].Reported == "single" && states[0].Goal == "single"
	})
	if err != nil {
		return err
	}
	_, err = c.exec(ctx, n.ctr, "psql", "-X", "-v", "ON_ERROR_STOP=1", "-d", "postgres",
		"-c", "ALTER SYSTEM SET checkpoint_completion_target = 0", "-c", "SELECT pg_reload_conf()")
	return err
}

// URL is the multi-host URL of db on the cluster's nodes, in node order,
// with target_session_attrs=read-write: a connection lands on whichever
// node accepts writes.
func (c *Cluster) URL(db string) string {
	hosts := make([]string, len(c.nodes))
	for i, n := range c.nodes {
		hosts[i] = "127.0.0.1:" + n.hostPort
	}
	return c.url(strings.Join(hosts, ","), db, "read-write")
}

// NodeURL is the URL of db on one node alone (any role: to read what a
// given server has).
func (c *Cluster) NodeURL(name, db string) (string, error) {
	n, err := c.node(name)
	if err != nil {
		return "", err
	}
	return c.url("127.0.0.1:"+n.hostPort, db, "any"), nil
}

func (c *Cluster) url(hosts, db, attrs string) string {
	q := url.Values{}
	q.Set("sslmode", "disable")
	q.Set("target_session_attrs", attrs)
	q.Set("connect_timeout", "5")
	return (&url.URL{Scheme: "postgres", User: url.User(User), Host: hosts, Path: "/" + db, RawQuery: q.Encode()}).String()
}

// Close removes the nodes, the monitor and the network (also after a
// failed Start). It is safe to call more than once.
func (c *Cluster) Close() error {
	c.closeMu.Lock()
	defer c.closeMu.Unlock()
	if c.closed {
		return nil
	}
	c.closed = true
	var errs []error
	// Nodes first: a keeper whose monitor is gone retries and logs.
	for _, n := range c.nodes {
		errs = append(errs, testcontainers.TerminateContainer(n.ctr))
	}
	if c.monitor != nil {
		errs = append(errs, testcontainers.TerminateContainer(c.monitor))
	}
	if c.net != nil {
		errs = append(errs, c.net.Remove(context.Background()))
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("hacluster: close: %w", err)
	}
	return nil
}

func (c *Cluster) describeNodes() string {
	parts := make([]string, len(c.nodes))
	for i, n := range c.nodes {
		parts[i] = n.name + " on 127.0.0.1:" + n.hostPort
	}
	return strings.Join(parts, ", ")
}

func (c *Cluster) node(name string) (*node, error) {
	for _, n := range c.nodes {
		if n.name == name {
			return n, nil
		}
	}
	return nil, fmt.Errorf("hacluster: no node %q", name)
}

// checkImage turns a missing image into ErrImageMissing instead of a pull
// attempt that cannot succeed.
func checkImage(ctx context.Context, image string) error {
	provider, err := testcontainers.NewDockerProvider()
	if err != nil {
		return fmt.Errorf("hacluster: docker is not reachable: %w", err)
	}
	defer provider.Close()
	if _, err := provider.Client().ImageInspect(ctx, image); err != nil {
		if cerrdefs.IsNotFound(err) {
			return fmt.Errorf("%w: %s is not present; build it with `make pgaf-image PG_MAJOR=%s`",
				ErrImageMissing, image, strings.TrimPrefix(image, "kfsdb-pgaf:"))
		}
		return fmt.Errorf("hacluster: could not inspect image %q: %w", image, err)
	}
	return nil
}

// checkReplicationMode checks that the primary waits for its standby
// (synchronous_standby_names set by pg_autoctl) exactly when Options.Sync
// asks for it.
func (c *Cluster) checkReplicationMode(ctx context.Context) error {
	primary, err := c.Primary(ctx)
	if err != nil {
		return err
	}
	n, err := c.node(primary)
	if err != nil {
		return err
	}
	out, err := c.exec(ctx, n.ctr, "psql", "-X", "-At", "-d", "postgres", "-c", "SHOW synchronous_standby_names")
	if err != nil {
		return err
	}
	names := strings.TrimSpace(out)
	if (names != "") != c.opts.Sync {
		return fmt.Errorf("hacluster: sync=%v but the primary's synchronous_standby_names is %q", c.opts.Sync, names)
	}
	c.opts.Logf("hacluster: %s synchronous_standby_names=%q", primary, names)
	return nil
}
