// Package failover_test kills the primary of a real HA PostgreSQL cluster
// (tests/hacluster: pg_auto_failover's monitor, a primary and a standby)
// under kfsdb, lets pg_auto_failover promote the standby, and checks what
// kfsdb's pool, pgsource's listener and its callers saw and what the
// promoted server holds; then the old primary rejoins and the new one is
// killed in turn (failover back).
//
// Each test starts its own cluster, of the image kfsdb-pgaf:17 (or
// KFS_TEST_PGAF_IMAGE), and runs only when KFS_FAILOVER=1 (`make
// failover`, which builds the image; .ci/run runs it at CI size): a
// missing image then fails the test. Under make test they skip.
package failover_test

import (
	"context"
	"os"
	"testing"

	"github.com/knowledgefs/kfsdb/tests/hacluster"
)

// startCluster starts a cluster for t and removes it at t's end; its
// containers' last log lines go to t's log when t fails.
func startCluster(t *testing.T, sync bool) *hacluster.Cluster {
	t.Helper()
	if os.Getenv("KFS_FAILOVER") == "" {
		// A cluster per test, minutes each: not in make test's budget.
		t.Skip("a pg_auto_failover cluster per test: runs under `make failover` (KFS_FAILOVER=1), which .ci/run calls at CI size")
	}
	ctx := context.Background()
	c, err := hacluster.Start(ctx, hacluster.Options{Sync: sync, Logf: t.Logf})
	if c != nil {
		t.Cleanup(func() {
			if t.Failed() {
				t.Log(c.Logs(context.Background(), 60))
			}
			if err := c.Close(); err != nil {
				t.Errorf("close the cluster: %v", err)
			}
		})
	}
	if err != nil {
		t.Fatalf("start the HA cluster: %v", err)
	}
	return c
}
