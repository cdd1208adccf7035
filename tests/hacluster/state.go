package hacluster

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/moby/moby/client"
)

// NodeState is one node as the monitor sees it (pgautofailover.node).
type NodeState struct {
	Name string
	// Reported is the state the node's keeper last reported, Goal the one
	// the monitor assigned; they are equal once the node has converged.
	Reported, Goal string
}

// writable are pg_auto_failover's states in which a node is the primary
// and takes writes (wait_primary: without a standby to wait for).
var writable = map[string]bool{"single": true, "wait_primary": true, "primary": true, "join_primary": true, "apply_settings": true}

// States asks the monitor for every node's state, ordered by name.
func (c *Cluster) States(ctx context.Context) ([]NodeState, error) {
	out, err := c.exec(ctx, c.monitor, "psql", "-X", "-At", "-F", " ", "-d", "pg_auto_failover", "-c",
		"SELECT nodename, reportedstate, goalstate FROM pgautofailover.node ORDER BY nodename")
	if err != nil {
		return nil, err
	}
	var states []NodeState
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		f := strings.Fields(line)
		if len(f) == 3 {
			states = append(states, NodeState{Name: f[0], Reported: f[1], Goal: f[2]})
		}
	}
	return states, nil
}

// Primary returns the node the monitor has as primary (converged in a
// writable state), or "" when there is none right now.
func (c *Cluster) Primary(ctx context.Context) (string, error) {
	states, err := c.States(ctx)
	if err != nil {
		return "", err
	}
	for _, s := range states {
		if s.Reported == s.Goal && writable[s.Reported] {
			return s.Name, nil
		}
	}
	return "", nil
}

// KillPrimary kills the primary's container (SIGKILL to every process in
// it: no shutdown checkpoint, no goodbye to the clients) and returns its
// name. The monitor then promotes the standby by itself.
func (c *Cluster) KillPrimary(ctx context.Context) (string, error) {
	name, err := c.Primary(ctx)
	if err != nil {
		return "", err
	}
	if name == "" {
		return "", fmt.Errorf("hacluster: no primary to kill")
	}
	n, err := c.node(name)
	if err != nil {
		return "", err
	}
	err = docker(ctx, n.ctr, "kill "+name, func(ctx context.Context, cl client.APIClient, id string) error {
		_, err := cl.ContainerKill(ctx, id, client.ContainerKillOptions{Signal: "KILL"})
		return err
	})
	if err != nil {
		return "", err
	}
	c.opts.Logf("hacluster: killed primary %s", name)
	return name, nil
}

// Standby returns a node the monitor has as a converged secondary, or ""
// when there is none right now.
func (c *Cluster) Standby(ctx context.Context) (string, error) {
	states, err := c.States(ctx)
	if err != nil {
		return "", err
	}
	for _, s := range states {
		if s.Reported == "secondary" && s.Goal == "secondary" {
			return s.Name, nil
		}
	}
	return "", nil
}

// StopReplication makes standby name stop receiving WAL
// (primary_conninfo emptied through ALTER SYSTEM, which outranks
// pg_autoctl's own setting, and reloaded): an asynchronous primary goes on
// committing, so the standby falls behind by what it commits meanwhile.
// (Freezing the standby's container would not: the kernel keeps
// receiving the WAL stream into the socket's buffer.) ResumeReplication
// gives pg_autoctl its setting back.
func (c *Cluster) StopReplication(ctx context.Context, name string) error {
	return c.setConninfo(ctx, name, "ALTER SYSTEM SET primary_conninfo = ''")
}

// ResumeReplication undoes StopReplication.
func (c *Cluster) ResumeReplication(ctx context.Context, name string) error {
	return c.setConninfo(ctx, name, "ALTER SYSTEM RESET primary_conninfo")
}

func (c *Cluster) setConninfo(ctx context.Context, name, stmt string) error {
	n, err := c.node(name)
	if err != nil {
		return err
	}
	_, err = c.exec(ctx, n.ctr, "psql", "-X", "-v", "ON_ERROR_STOP=1", "-d", "postgres", "-c", stmt, "-c", "SELECT pg_reload_conf()")
	return err
}

// StartNode starts a killed node's container again: its keeper finds the
// other node promoted, rewinds its data directory (pg_rewind) and follows
// it as a standby. StartNode returns once the container runs; WaitHealthy
// waits for the rejoin.
func (c *Cluster) StartNode(ctx context.Context, name string) error {
	n, err := c.node(name)
	if err != nil {
		return err
	}
	if err := n.ctr.Start(ctx); err != nil {
		return fmt.Errorf("hacluster: start %s: %w", name, err)
	}
	c.opts.Logf("hacluster: started %s again", name)
	return nil
}

// WaitPrimary waits until the monitor has a primary other than not
// (promoted by pg_auto_failover) and that node takes writes on its
// published port, and returns its name.
func (c *Cluster) WaitPrimary(ctx context.Context, not string, timeout time.Duration) (string, error) {
	var primary string
	t0 := time.Now()
	err := c.waitState(ctx, timeout, "a primary other than "+not, func(states []NodeState) bool {
		for _, s := range states {
			if s.Name != not && s.Reported == s.Goal && writable[s.Reported] && c.takesWrites(ctx, s.Name) {
				primary = s.Name
				return true
			}
		}
		return false
	})
	if err == nil {
		c.opts.Logf("hacluster: %s promoted, %s after the wait began", primary, time.Since(t0).Round(time.Millisecond))
	}
	return primary, err
}

// WaitHealthy waits until one node is primary and every other one a
// secondary, all converged: then a synchronous standby has every commit.
func (c *Cluster) WaitHealthy(ctx context.Context, timeout time.Duration) error {
	return c.waitState(ctx, timeout, "one primary and its secondaries", func(states []NodeState) bool {
		if len(states) != len(c.nodes) || len(states) < 2 {
			return false
		}
		primaries := 0
		for _, s := range states {
			switch {
			case s.Reported != s.Goal:
				return false
			case s.Reported == "primary":
				primaries++
			case s.Reported != "secondary":
				return false
			}
		}
		return primaries == 1
	})
}

// waitState polls the monitor until ok holds or timeout passes; the error
// names what was awaited and the last states seen.
func (c *Cluster) waitState(ctx context.Context, timeout time.Duration, what string, ok func([]NodeState) bool) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var last []NodeState
	var lastErr error
	for {
		states, err := c.States(ctx)
		if err == nil {
			last = states
			if ok(states) {
				return nil
			}
		} else {
			lastErr = err
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("hacluster: no %s after %s: monitor reports %v (last error: %v)", what, timeout, last, lastErr)
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// takesWrites reports whether name accepts a read-write session now
// (pg_auto_failover keeps a promoted standby read-only until the monitor
// confirms the promotion).
func (c *Cluster) takesWrites(ctx context.Context, name string) bool {
	u, err := c.NodeURL(name, Database)
	if err != nil {
		return false
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, u)
	if err != nil {
		return false
	}
	defer conn.Close(context.WithoutCancel(ctx))
	var ro string
	if err := conn.QueryRow(ctx, "SELECT CASE WHEN pg_is_in_recovery() THEN 'on' ELSE current_setting('transaction_read_only') END").Scan(&ro); err != nil {
		return false
	}
	return ro == "off"
}
