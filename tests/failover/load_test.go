package failover_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/knowledgefs/kfsdb/tests/faultload"
	"github.com/knowledgefs/kfsdb/tests/hacluster"
)

// EnvReport names a file TestFailoverUnderLoad appends its summary lines
// to (`make failover` writes bench/out/failover.txt through it).
const EnvReport = "KFS_FAILOVER_REPORT"

// loadPaths are the delivery paths run across a failover: direct delivery
// woken by LISTEN, direct delivery polling, the relay to NATS JetStream.
var loadPaths = []faultload.Path{faultload.DirectListen, faultload.DirectPoll, faultload.RelayNATS}

// mode is a replication mode of the cluster.
type mode struct {
	name string
	sync bool
	// lag: the standby stops receiving WAL this long before the first
	// kill (and resumes after it), so an asynchronous one lags by what
	// the primary committed meanwhile.
	lag time.Duration
}

// modes: a synchronous standby; an asynchronous one, as replication
// keeps up at this load; an asynchronous one that lags by 2 s at the kill
// (a standby behind after a network hiccup or a burst).
var modes = []mode{{"sync", true, 0}, {"async", false, 0}, {"async-lagging", false, 2 * time.Second}}

// TestFailoverUnderLoad runs faultload's load on each path and in each
// mode, kills the primary mid-run, lets pg_auto_failover promote the
// standby, keeps the load on, starts the old primary again, lets it
// rejoin, kills the new primary (failover back) and drains. Synchronous:
// nothing lost, nothing done twice, no overlapping leases, every check
// clean. Asynchronous: what the promoted server lost is counted, and
// kfsdb's state must stay consistent (every row's pairing invariants,
// fencing, app writes with their attempts, only retryable errors).
func TestFailoverUnderLoad(t *testing.T) {
	var summaries []string
	var mu sync.Mutex
	t.Cleanup(func() { writeReport(t, summaries) })
	for _, m := range modes {
		for _, path := range loadPaths {
			t.Run(fmt.Sprintf("%s/%s", path, m.name), func(t *testing.T) {
				rep := failoverRun(t, path, m)
				line := rep.Summary(m.name)
				mu.Lock()
				summaries = append(summaries, line)
				mu.Unlock()
				t.Log(line)
				t.Log(rep.String())
				if m.sync {
					rep.Require(t)
					return
				}
				requireConsistent(t, rep)
			})
		}
	}
}

// failoverRun is one path's run across two failovers.
func failoverRun(t *testing.T, path faultload.Path, m mode) *faultload.Report {
	c := startCluster(t, m.sync)
	ctx := context.Background()
	run := faultload.Start(ctx, t, &faultload.Config{
		Path: path, URL: c.URL(hacluster.Database),
		// About 20 Starts a second for a minute and more: the producers
		// are still at work through both failovers and the rejoin.
		Upfront: 100, Documents: 1500, Producers: 2, Interval: 100 * time.Millisecond, InTxFraction: 0.3,
		LeaseDuration: 3 * time.Second, Stall: stallTimeout,
	})
	require.NoError(t, run.WaitCompleted(ctx, 50))
	lagging := ""
	if m.lag > 0 {
		standby, err := c.Standby(ctx)
		require.NoError(t, err)
		require.NotEmpty(t, standby, "no standby to hold back")
		require.NoError(t, c.StopReplication(ctx, standby))
		lagging = standby
		time.Sleep(m.lag)
	}
	first := killAndWait(ctx, t, c, run, "", lagging)
	require.NoError(t, run.WaitCompleted(ctx, int(run.Completed())+20), "no completions after the first failover")
	require.NoError(t, c.StartNode(ctx, first))
	require.NoError(t, c.WaitHealthy(ctx, rejoinTimeout), "%s did not rejoin", first)
	killAndWait(ctx, t, c, run, first, "")
	return run.Finish(ctx)
}

// killAndWait kills the primary, marks the fault, lets the lagging
// standby (if any) have pg_autoctl's replication setting back, and waits
// for the promotion of another node (want, when set); it returns the
// killed node.
func killAndWait(ctx context.Context, t *testing.T, c *hacluster.Cluster, run *faultload.Run, want, lagging string) string {
	t.Helper()
	killed, err := c.KillPrimary(ctx)
	require.NoError(t, err)
	// Marked once the container is dead: a Start that succeeds after the
	// mark went through the promoted standby (the RTO counts from here).
	run.MarkFault("kill primary " + killed)
	if lagging != "" {
		require.NoError(t, c.ResumeReplication(ctx, lagging))
	}
	primary, err := c.WaitPrimary(ctx, killed, promotionTimeout)
	require.NoError(t, err)
	if want != "" {
		require.Equal(t, want, primary)
	}
	return killed
}

// requireConsistent is what an asynchronous failover must keep: the
// promoted server may lack acknowledged commits, but what it has is
// consistent.
func requireConsistent(t *testing.T, rep *faultload.Report) {
	t.Helper()
	require.Zero(t, rep.InvariantViolations, "rows breaking the pairing invariants: %s", rep)
	require.Zero(t, rep.UnfencedWrites, "writes under an expired lease: %s", rep)
	require.Zero(t, rep.AppWriteMismatches, "app writes and attempts not committed together: %s", rep)
	require.Zero(t, rep.NonRetryable.N, "errors not repo.IsRetryable: %s", rep)
	require.Zero(t, rep.RuntimeNonRetryable.N, "runtime errors not repo.IsRetryable: %s", rep)
	require.Zero(t, rep.ReadAsState.N, "transient errors read as a state: %s", rep)
	require.Zero(t, rep.NotTerminal, "attempts still live after the drain: %s", rep)
}

// writeReport appends the summary lines to the EnvReport file, if named.
func writeReport(t *testing.T, lines []string) {
	path := os.Getenv(EnvReport)
	if path == "" || len(lines) == 0 {
		return
	}
	require.NoError(t, os.MkdirAll(filepath.Dir(path), 0o755))
	f, err := os.OpenFile(path, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	require.NoError(t, err)
	defer f.Close()
	for _, l := range lines {
		_, err := fmt.Fprintln(f, l)
		require.NoError(t, err)
	}
}
