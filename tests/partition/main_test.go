package partition_test

import (
	"os"
	"testing"

	"github.com/knowledgefs/kfsdb/tests/pgtest"
)

// pgAlias is PostgreSQL's name on the package's Docker network, where the
// cut-off programs reach it.
const pgAlias = "postgres"

func TestMain(m *testing.M) {
	code := pgtest.Run(m, pgtest.Options{NetworkAlias: pgAlias})
	removeProgram()
	os.Exit(code)
}
