package partition_test

import (
	"os"
	"testing"

	"github.com/knowledgefs/kfsdb/tests/pgtest"
)

// pingTimeout is the programs' pool_ping_timeout, as docs/RELIABILITY.md
// advises: a connection the pool hands out after it sat idle is pinged
// first, and one that died with the route (the program came back with
// another address) is dropped after this long instead of holding the
// statement for its whole context, or with none for the kernel's TCP
// retransmission timeout (about 15 minutes).
const pingTimeout = "1s"

// programURL is db's URL as a program on the server's network reaches it.
func programURL(t *testing.T, db *pgtest.DB) string {
	t.Helper()
	return pgtest.CurrentServer(t).NetworkURL(db.URL) + "&pool_ping_timeout=" + pingTimeout
}

// pgAlias is PostgreSQL's name on the package's Docker network, where the
// cut-off programs reach it.
const pgAlias = "postgres"

func TestMain(m *testing.M) {
	code := pgtest.Run(m, pgtest.Options{NetworkAlias: pgAlias})
	removeProgram()
	os.Exit(code)
}
