package hacluster

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/netip"
	"strings"
	"time"

	"github.com/moby/moby/api/types/container"
	mnetwork "github.com/moby/moby/api/types/network"
	"github.com/moby/moby/client"
	"github.com/testcontainers/testcontainers-go"
	tcexec "github.com/testcontainers/testcontainers-go/exec"
	"github.com/testcontainers/testcontainers-go/network"

	"github.com/knowledgefs/kfsdb/tests/pgtest"
)

// monitorURI is how keepers reach the monitor on the cluster network.
const monitorURI = "postgres://autoctl_node@monitor:5432/pg_auto_failover?sslmode=disable"

// runScript starts a keeper or the monitor. pg_autoctl keeps its pid file
// under /tmp: a container started again (after a kill) finds its own
// old pid 1 there and refuses to run ("already running with pid 1"), so
// the file goes first. A node whose `create` finished runs again as it
// was (the keeper rewinds it into a standby); otherwise `create` starts or
// resumes the registration.
const runScript = `rm -rf /tmp/pg_autoctl
state="$HOME/.local/share/pg_autoctl$PGDATA/pg_autoctl.state"
if [ -f "$state" ] && [ ! -f "${state%.state}.init" ]; then exec pg_autoctl run --pgdata "$PGDATA"; fi
exec "$@"`

func (c *Cluster) startMonitor(ctx context.Context) error {
	ctr, err := c.run(ctx, "monitor", "", "pg_autoctl", "create", "monitor", "--pgdata", pgdata, "--pgport", "5432",
		"--hostname", "monitor", "--auth", "trust", "--no-ssl", "--run")
	c.monitor = ctr
	if err != nil {
		return err
	}
	if err := c.waitMonitor(ctx, monitorStartTimeout); err != nil {
		return err
	}
	args := []string{"psql", "-X", "-v", "ON_ERROR_STOP=1", "-d", "pg_auto_failover"}
	for _, s := range MonitorSettings {
		args = append(args, "-c", fmt.Sprintf("ALTER SYSTEM SET %s = %s", s[0], s[1]))
	}
	_, err = c.exec(ctx, c.monitor, append(args, "-c", "SELECT pg_reload_conf()")...)
	return err
}

func (c *Cluster) startNode(ctx context.Context, name string) (*node, error) {
	port, err := pgtest.FreeLoopbackPort()
	if err != nil {
		return nil, fmt.Errorf("hacluster: could not choose a port for %s: %w", name, err)
	}
	quorum := "true"
	if !c.opts.Sync {
		quorum = "false"
	}
	ctr, err := c.run(ctx, name, port, "pg_autoctl", "create", "postgres", "--pgdata", pgdata, "--pgport", "5432",
		"--hostname", name, "--name", name, "--monitor", monitorURI, "--auth", "trust", "--no-ssl",
		// --pg-hba-lan: the application's connections come through the
		// published port from the network's gateway.
		"--pg-hba-lan", "--dbname", Database, "--replication-quorum", quorum, "--run")
	if ctr == nil {
		return nil, err
	}
	return &node{name: name, hostPort: port, ctr: ctr}, err
}

// run starts one container of the cluster as user postgres, under the
// network alias name; hostPort, if set, publishes 5432 there on loopback.
func (c *Cluster) run(ctx context.Context, name, hostPort string, cmd ...string) (*testcontainers.DockerContainer, error) {
	opts := []testcontainers.ContainerCustomizer{
		testcontainers.WithEntrypoint("bash", "-c", runScript, "run"),
		testcontainers.WithCmd(cmd...),
		testcontainers.WithEnv(map[string]string{"PGDATA": pgdata}),
		network.WithNetwork([]string{name}, c.net),
		pgtest.RunLabels(),
		testcontainers.WithConfigModifier(func(cfg *container.Config) {
			cfg.User = User
			cfg.Hostname = name
		}),
	}
	if hostPort != "" {
		opts = append(opts,
			testcontainers.WithExposedPorts("5432/tcp"),
			testcontainers.WithHostConfigModifier(func(hc *container.HostConfig) {
				hc.PortBindings = mnetwork.PortMap{
					mnetwork.MustParsePort("5432/tcp"): {{HostIP: netip.MustParseAddr("127.0.0.1"), HostPort: hostPort}},
				}
			}))
	}
	ctr, err := testcontainers.Run(ctx, c.opts.Image, opts...)
	if err != nil {
		return ctr, fmt.Errorf("hacluster: could not start %s: %w", name, err)
	}
	return ctr, nil
}

// exec runs cmd in ctr (as its user, postgres) and returns its output; a
// non-zero exit is an error carrying the output.
func (c *Cluster) exec(ctx context.Context, ctr testcontainers.Container, cmd ...string) (string, error) {
	code, r, err := ctr.Exec(ctx, cmd, tcexec.Multiplexed())
	if err != nil {
		return "", fmt.Errorf("hacluster: exec %q: %w", strings.Join(cmd, " "), err)
	}
	out, _ := io.ReadAll(r)
	if code != 0 {
		return string(out), fmt.Errorf("hacluster: exec %q: exit %d: %s", strings.Join(cmd, " "), code, bytes.TrimSpace(out))
	}
	return string(out), nil
}

// docker runs do with the Docker client on ctr.
func docker(ctx context.Context, ctr testcontainers.Container, verb string, do func(context.Context, client.APIClient, string) error) error {
	provider, err := testcontainers.NewDockerProvider()
	if err != nil {
		return fmt.Errorf("hacluster: %s: %w", verb, err)
	}
	defer provider.Close()
	if err := do(ctx, provider.Client(), ctr.GetContainerID()); err != nil {
		return fmt.Errorf("hacluster: %s: %w", verb, err)
	}
	return nil
}

// Logs returns the last lines of each container's log (the monitor's and
// the keepers' decisions), for a failing test's message.
func (c *Cluster) Logs(ctx context.Context, lines int) string {
	var b strings.Builder
	ctrs := []*testcontainers.DockerContainer{c.monitor}
	names := []string{"monitor"}
	for _, n := range c.nodes {
		ctrs = append(ctrs, n.ctr)
		names = append(names, n.name)
	}
	for i, ctr := range ctrs {
		if ctr == nil {
			continue
		}
		fmt.Fprintf(&b, "----- last %d log lines of %s -----\n", lines, names[i])
		rc, err := ctr.Logs(ctx)
		if err != nil {
			fmt.Fprintf(&b, "(no logs: %v)\n", err)
			continue
		}
		all, _ := io.ReadAll(rc)
		rc.Close()
		ls := strings.Split(strings.TrimRight(string(all), "\n"), "\n")
		if len(ls) > lines {
			ls = ls[len(ls)-lines:]
		}
		b.WriteString(strings.Join(ls, "\n") + "\n")
	}
	return b.String()
}

// waitMonitor waits until the monitor answers with its node table.
func (c *Cluster) waitMonitor(ctx context.Context, timeout time.Duration) error {
	return c.waitState(ctx, timeout, "monitor", func([]NodeState) bool { return true })
}
