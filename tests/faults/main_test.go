// Package faults_test injects faults into a load run (tests/faultload) on
// every delivery path (direct delivery with LISTEN and poll-only, the
// relay to memqueue and to NATS JetStream) against a real PostgreSQL:
// backends killed with pg_terminate_backend, the server restarted,
// crashed (SIGKILL) and frozen (container paused) for longer than the
// lease. Afterwards every attempt has succeeded exactly once, nothing is
// lost, no two valid leases overlapped and no write was made under a lost
// lease.
//
// The server keeps its data on disk (pgtest.Options.PersistentData) so it
// survives a restart. The tests share it, so they do not run in parallel.
// KFS_SOAK=1 runs the long form.
package faults_test

import (
	"testing"

	"github.com/knowledgefs/kfsdb/tests/pgtest"
)

func TestMain(m *testing.M) { pgtest.MainWithOptions(m, pgtest.Options{PersistentData: true}) }
