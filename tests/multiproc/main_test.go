// Package multiproc_test races two `kfsdb work` processes, a relay and a
// worker in the test process, and goroutines cancelling, superseding and
// retrying attempts, all on the same rows of one database. Afterwards every
// attempt is terminal exactly once with its one outbox row in the matching
// status, no two valid leases overlapped, no write was made under a lost
// lease and PostgreSQL never raised a deadlock (SQLSTATE 40P01).
//
// KFS_SOAK=1 runs the long form.
package multiproc_test

import (
	"testing"

	"github.com/knowledgefs/kfsdb/tests/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }
