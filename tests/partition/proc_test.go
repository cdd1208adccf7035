package partition_test

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/moby/moby/api/types/network"
	"github.com/moby/moby/client"
	"github.com/stretchr/testify/require"
	"github.com/testcontainers/testcontainers-go"
	tcnetwork "github.com/testcontainers/testcontainers-go/network"

	"github.com/knowledgefs/kfsdb/tests/capability"
	"github.com/knowledgefs/kfsdb/tests/partition"
	"github.com/knowledgefs/kfsdb/tests/pgtest"
)

// waitFor bounds every wait on the program: generous, since two cores are
// shared with other test runs; nothing asserts how long a step took.
const waitFor = 90 * time.Second

var build struct {
	once sync.Once
	bin  string
	err  error
	out  []byte
}

// buildProgram builds tests/cmd/kfsdb-partition statically (the image has
// no Go and its libc need not match), once per package run.
func buildProgram(t *testing.T) string {
	t.Helper()
	build.once.Do(func() {
		dir, err := os.MkdirTemp("", "kfsdb-partition")
		if err != nil {
			build.err = err
			return
		}
		build.bin = filepath.Join(dir, "kfsdb-partition")
		cmd := exec.Command("go", "build", "-o", build.bin, "./cmd/kfsdb-partition")
		cmd.Dir = ".."
		cmd.Env = append(os.Environ(), "GOWORK=off", "CGO_ENABLED=0")
		build.out, build.err = cmd.CombinedOutput()
	})
	require.NoError(t, build.err, "go build tests/cmd/kfsdb-partition:\n%s", build.out)
	return build.bin
}

// removeProgram removes what buildProgram built, after the tests.
func removeProgram() {
	if build.bin != "" {
		_ = os.RemoveAll(filepath.Dir(build.bin))
	}
}

// program is kfsdb-partition running in its own container on the
// server's network.
type program struct {
	t       *testing.T
	name    string
	ctr     *testcontainers.DockerContainer
	network string
	address string // on network, before the cut
}

// startProgram runs kfsdb-partition args in a container from the server's
// image, on the server's network only, so that cutting it from that
// network cuts it from PostgreSQL and from nothing else the test needs.
func startProgram(t *testing.T, name string, args ...string) *program {
	t.Helper()
	srv := pgtest.CurrentServer(t)
	if srv.Network() == "" {
		capability.Missing(t, capability.Container, "partition: %s is set, so there is no container network to cut a worker off from; run without it (pgtest starts %s)",
			pgtest.EnvDatabaseURL, pgtest.DefaultImage)
	}
	bin := buildProgram(t)
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	ctr, err := testcontainers.Run(ctx, srv.Image(),
		testcontainers.WithEntrypoint("/kfsdb-partition"),
		testcontainers.WithCmd(args...),
		testcontainers.WithFiles(testcontainers.ContainerFile{HostFilePath: bin, ContainerFilePath: "/kfsdb-partition", FileMode: 0o755}),
		tcnetwork.WithNetworkName([]string{name}, srv.Network()),
		pgtest.RunLabels(),
	)
	t.Cleanup(func() {
		if ctr != nil {
			if t.Failed() {
				t.Logf("%s's output:\n%s", name, (&program{t: t, ctr: ctr}).logs())
			}
			_ = testcontainers.TerminateContainer(ctr)
		}
	})
	require.NoError(t, err, "start %s", name)
	nets, err := ctr.Networks(ctx)
	require.NoError(t, err)
	require.Equal(t, []string{srv.Network()}, nets, "%s must be on the test's network only", name)
	p := &program{t: t, name: name, ctr: ctr, network: srv.Network()}
	p.address = p.addressOn()
	return p
}

func (p *program) docker(do func(ctx context.Context, c client.APIClient) error) {
	p.t.Helper()
	provider, err := testcontainers.NewDockerProvider()
	require.NoError(p.t, err)
	defer provider.Close()
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	require.NoError(p.t, do(ctx, provider.Client()))
}

// cut disconnects the program from the network: it has no route to
// PostgreSQL until reconnect, while it keeps running.
func (p *program) cut() {
	p.t.Helper()
	p.docker(func(ctx context.Context, c client.APIClient) error {
		_, err := c.NetworkDisconnect(ctx, p.network, client.NetworkDisconnectOptions{Container: p.ctr.GetContainerID(), Force: true})
		return err
	})
}

// reconnect gives the program its route back. With newAddress, another
// container takes the address the program had first, so the program comes
// back with another one and the connections it had are dead for good (as
// when a NAT or a firewall forgot them): every packet on them is lost
// until the pool gives them up. Without, Docker hands the old address
// back (the lowest free one; later Docker versions may allocate another),
// and the connections live on. It returns the program's addresses before
// and after.
func (p *program) reconnect(newAddress bool) (before, after string) {
	p.t.Helper()
	before = p.address
	if newAddress {
		ctx, cancel := context.WithTimeout(context.Background(), waitFor)
		defer cancel()
		sq, err := testcontainers.Run(ctx, pgtest.CurrentServer(p.t).Image(), testcontainers.WithEntrypoint("sleep"), testcontainers.WithCmd("600"),
			tcnetwork.WithNetworkName([]string{p.name + "-squatter"}, p.network), pgtest.RunLabels())
		p.t.Cleanup(func() {
			if sq != nil {
				_ = testcontainers.TerminateContainer(sq)
			}
		})
		require.NoError(p.t, err, "start the container that takes %s's address", p.name)
	}
	p.docker(func(ctx context.Context, c client.APIClient) error {
		_, err := c.NetworkConnect(ctx, p.network, client.NetworkConnectOptions{
			Container: p.ctr.GetContainerID(), EndpointConfig: &network.EndpointSettings{Aliases: []string{p.name}},
		})
		return err
	})
	p.address = p.addressOn()
	if newAddress {
		require.NotEqual(p.t, before, p.address, "%s came back with its old address", p.name)
	}
	return before, p.address
}

// addressOn returns the program's address on the network.
func (p *program) addressOn() string {
	p.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	ins, err := p.ctr.Inspect(ctx)
	require.NoError(p.t, err)
	ep := ins.NetworkSettings.Networks[p.network]
	require.NotNil(p.t, ep, "%s is not on %s", p.name, p.network)
	return ep.IPAddress.String()
}

// openGate sends the program partition.Gate (no network needed).
func (p *program) openGate() {
	p.t.Helper()
	p.docker(func(ctx context.Context, c client.APIClient) error {
		_, err := c.ContainerKill(ctx, p.ctr.GetContainerID(), client.ContainerKillOptions{Signal: partition.Gate})
		return err
	})
}

// logs returns everything the program printed so far.
func (p *program) logs() string {
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	rc, err := p.ctr.Logs(ctx)
	if err != nil {
		return "(logs: " + err.Error() + ")"
	}
	defer rc.Close()
	b, _ := io.ReadAll(rc)
	return string(b)
}

// events parses the program's JSON lines so far.
func (p *program) events() []partition.Event {
	p.t.Helper()
	var out []partition.Event
	sc := bufio.NewScanner(strings.NewReader(p.logs()))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, "{") {
			continue // a log line (stderr)
		}
		var ev partition.Event
		require.NoError(p.t, json.Unmarshal([]byte(line), &ev), "%s printed %q", p.name, line)
		out = append(out, ev)
	}
	return out
}

// waitEvents waits until the program has printed n events of kind, and
// returns them; what it waits for is said in why.
func (p *program) waitEvents(kind string, n int, why string) []partition.Event {
	p.t.Helper()
	deadline := time.Now().Add(waitFor)
	for {
		var got []partition.Event
		for _, ev := range p.events() {
			if ev.Event == kind {
				got = append(got, ev)
			}
		}
		if len(got) >= n {
			return got
		}
		if time.Now().After(deadline) {
			require.FailNow(p.t, "timed out", "%s: %s: %d %q events after %s, want %d; output:\n%s", p.name, why, len(got), kind, waitFor, n, p.logs())
		}
		time.Sleep(100 * time.Millisecond)
	}
}
