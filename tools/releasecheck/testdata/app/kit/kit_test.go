package kit

import (
	"testing"

	"github.com/knowledgefs/kfsdb/kfsdbtest"
)

func TestMain(m *testing.M) { kfsdbtest.Main(m) }

func TestTheKitGivesAMigratedDatabase(t *testing.T) {
	db := kfsdbtest.NewDB(t)
	if _, err := kfsdbtest.InsertDocument(t.Context(), db.Pool, "acme"); err != nil {
		t.Fatal(err)
	}
}
