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

// TestFailoverUnderLoad runs faultload's load on each path, with a
// synchronous standby and with an asynchronous one, kills the primary
// mid-run, lets pg_auto_failover promote the standby, keeps the load on,
// starts the old primary again, lets it rejoin, kills the new primary
// (failover back) and drains. Synchronous: nothing lost, nothing done
// twice, no overlapping leases, every check clean. Asynchronous: what the
// promoted server lost is counted, and kfsdb's state must stay consistent
// (every row's pairing invariants, fencing, app writes with their
// attempts, only retryable errors).
func TestFailoverUnderLoad(t *testing.T) {
	var summaries []string
	var mu sync.Mutex
	t.Cleanup(func() { writeReport(t, summaries) })
	for _, sync := range []bool{true, false} {
		for _, path := range loadPaths {
			mode := map[bool]string{true: "sync", false: "async"}[sync]
			t.Run(fmt.Sprintf("%s/%s", path, mode), func(t *testing.T) {
				rep := failoverRun(t, path, sync)
				line := rep.Summary(mode)
				mu.Lock()
				summaries = append(summaries, line)
				mu.Unlock()
				t.Log(line)
				t.Log(rep.String())
				if sync {
					rep.Require(t)
					return
				}
				requireConsistent(t, rep)
			})
		}
	}
}

// failoverRun is one path's run across two failovers.
func failoverRun(t *testing.T, path faultload.Path, sync bool) *faultload.Report {
	c := startCluster(t, sync)
	ctx := context.Background()
	run := faultload.Start(ctx, t, &faultload.Config{
		Path: path, URL: c.URL(hacluster.Database),
		// About 20 Starts a second for a minute and more: the producers
		// are still at work through both failovers and the rejoin.
		Upfront: 100, Documents: 1500, Producers: 2, Interval: 100 * time.Millisecond, InTxFraction: 0.3,
		LeaseDuration: 3 * time.Second, Stall: stallTimeout,
	})
	require.NoError(t, run.WaitCompleted(ctx, 50))
	first := killAndWait(ctx, t, c, run, "")
	require.NoError(t, run.WaitCompleted(ctx, int(run.Completed())+20), "no completions after the first failover")
	require.NoError(t, c.StartNode(ctx, first))
	require.NoError(t, c.WaitHealthy(ctx, rejoinTimeout), "%s did not rejoin", first)
	killAndWait(ctx, t, c, run, first)
	return run.Finish(ctx)
}

// killAndWait kills the primary, marks the fault and waits for the
// promotion of another node (want, when set); it returns the killed node.
func killAndWait(ctx context.Context, t *testing.T, c *hacluster.Cluster, run *faultload.Run, want string) string {
	t.Helper()
	killed, err := c.KillPrimary(ctx)
	require.NoError(t, err)
	// Marked once the container is dead: a Start that succeeds after the
	// mark went through the promoted standby (the RTO counts from here).
	run.MarkFault("kill primary " + killed)
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
