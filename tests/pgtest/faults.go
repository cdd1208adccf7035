package pgtest

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/moby/moby/client"
	"github.com/testcontainers/testcontainers-go"
)

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
func (s *Server) Crash(ctx context.Context) error { return s.Outage(ctx, 0) }

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
//
// The kernel's cgroup freezer can fail to freeze a process that is busy in
// the kernel (runc then reports "unable to freeze" and thaws the container,
// leaving it running): seen once in CI on a loaded machine. Pause tries
// again then, up to pauseTries times; any other error is returned at once.
func (s *Server) Pause(ctx context.Context) error {
	return s.dockerDo(ctx, "pause", func(c client.APIClient, id string) error {
		for try := 1; ; try++ {
			_, err := c.ContainerPause(ctx, id, client.ContainerPauseOptions{})
			if err == nil || try == pauseTries || !strings.Contains(err.Error(), "unable to freeze") {
				return err
			}
			select {
			case <-ctx.Done():
				return err
			case <-time.After(100 * time.Millisecond):
			}
		}
	})
}

// pauseTries bounds Pause's attempts when the freezer could not freeze.
const pauseTries = 10

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
