package pgtest

import (
	"context"
	"fmt"
	"time"

	"github.com/moby/moby/client"
)

// Outage kills the container's processes at once (SIGKILL, as Crash),
// keeps the server down for down (connections to its port are refused, as
// to a dead primary's address), then starts it again and waits until it
// accepts connections after crash recovery. Like Crash it needs a
// container started with [Options.PersistentData].
func (s *Server) Outage(ctx context.Context, down time.Duration) error {
	if s.container == nil || !s.persistent {
		return fmt.Errorf("%w: Crash and Outage need a container started with PersistentData", ErrNotControllable)
	}
	err := s.dockerDo(ctx, "kill", func(c client.APIClient, id string) error {
		_, err := c.ContainerKill(ctx, id, client.ContainerKillOptions{Signal: "KILL"})
		return err
	})
	if err != nil {
		return err
	}
	if down > 0 {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(down):
		}
	}
	return s.startAgain(ctx)
}
