// Package docexample_test is the package documentation's example of
// kfsdbtest (kfsdbtest.go), compiled and run: TestPackageDocIsDocexample
// requires the doc's code block to be this file from TestMain on, byte for
// byte.
package docexample_test

import (
	"testing"

	"github.com/knowledgefs/kfsdb/kfsdbtest"
	"github.com/knowledgefs/kfsdb/kfstype"
)

func TestMain(m *testing.M) { kfsdbtest.Main(m) }

func TestCompile(t *testing.T) {
	db := kfsdbtest.NewDB(t)                       // migrated, this test's own
	doc := db.Document(t, "acme")                  // space, asset, candidate
	a := db.Start(t, db.StartParams(t, doc.Asset)) // dispatch_pending
	db.Work(t, myHandler(doc.Candidate), nil)      // lease, handler, outcome
	db.RequireAttempt(t, a.ID, kfsdbtest.AttemptWant{RunState: kfstype.RunStateSucceeded})
}
