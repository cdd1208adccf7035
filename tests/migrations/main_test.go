package migrations

import (
	"os"
	"testing"

	"github.com/knowledgefs/kfsdb/tests/pgtest"
)

func TestMain(m *testing.M) {
	// The 10^6-row lock measurement needs what production has: fsync on
	// and the data on disk, not tmpfs.
	pgtest.MainWithOptions(m, pgtest.Options{Durable: os.Getenv(envMigrationLocks) == "1"})
}
