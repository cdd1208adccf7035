// Package failover_test kills the primary of a real HA PostgreSQL cluster
// (tests/hacluster: pg_auto_failover's monitor, a primary and a standby)
// under kfsdb, lets pg_auto_failover promote the standby, and checks what
// kfsdb's pool, pgsource's listener and its callers saw and what the
// promoted server holds; then the old primary rejoins and the new one is
// killed in turn (failover back).
//
// Each test starts its own cluster. Without the image (kfsdb-pgaf:17, or
// KFS_TEST_PGAF_IMAGE) the tests skip through tests/capability, unless
// KFS_FAILOVER=1 asks for them (`make failover`), which fails instead.
package failover_test

import (
	"context"
	"errors"
	"os"
	"testing"

	"github.com/knowledgefs/kfsdb/tests/capability"
	"github.com/knowledgefs/kfsdb/tests/hacluster"
)

// startCluster starts a cluster for t and removes it at t's end; its
// containers' last log lines go to t's log when t fails.
func startCluster(t *testing.T, sync bool) *hacluster.Cluster {
	t.Helper()
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
	if errors.Is(err, hacluster.ErrImageMissing) && os.Getenv("KFS_FAILOVER") == "" {
		capability.Missing(t, capability.HACluster, "%v", err)
	}
	if err != nil {
		t.Fatalf("start the HA cluster: %v", err)
	}
	return c
}
