// Package multiproc_test runs `kfsdb-bench work` as separate OS processes on
// one database.
//
// TestProcessesRaceOnTheSameRows races two `kfsdb-bench work --delivery relay`
// processes, a relay and a worker in the test process, and goroutines
// cancelling, superseding and retrying attempts, all on the same rows.
//
// TestThreeDirectProcessesOneKilled runs three `kfsdb-bench work --delivery
// postgres` processes (each worker leases straight from the outbox) on
// several tenants' attempts and kills one with SIGKILL while it holds
// leases; the two others finish everything, the dead one's attempts once
// its leases expire. Every attempt succeeds, exactly once.
//
// Afterwards, in both, every attempt is terminal exactly once with its one
// outbox row in the matching status, no two valid leases overlapped, no
// write was made under a lost lease and PostgreSQL never raised a deadlock
// (SQLSTATE 40P01).
//
// KFS_SOAK=1 runs the long forms.
package multiproc_test

import (
	"testing"

	"github.com/knowledgefs/kfsdb/tests/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }
