package main

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/knowledgefs/kfsdb/kfsdbtest"
	"github.com/knowledgefs/kfsdb/kfstype"
	"github.com/knowledgefs/kfsdb/worker"
)

// TestMain and TestCompile are the test kit's example in the README and
// docs/ADOPTING.md, run as written (tests/docsnippets checks that the
// documents show this text).
func TestMain(m *testing.M) { kfsdbtest.Main(m) }

func TestCompile(t *testing.T) {
	db := kfsdbtest.NewDB(t)
	doc := db.Document(t, "acme") // space, document version 1, candidate publication
	a := db.Start(t, db.StartParams(t, doc.Asset))
	res := db.Work(t, myHandler(doc.Candidate), nil)
	require.Equal(t, worker.OutcomeCompleted, res.Outcome)
	db.RequireAttempt(t, a.ID, kfsdbtest.AttemptWant{RunState: kfstype.RunStateSucceeded, Checkpoint: kfstype.CheckpointPublished})
}

// myHandler is the example's handler: it compiles nothing and binds the
// candidate, so the worker completes the attempt.
func myHandler(candidate kfsdbtest.Publication) worker.Handler {
	return worker.HandlerFunc(func(_ context.Context, job *worker.Job) error {
		job.CompleteThrough(candidate.ID, candidate.Fingerprint)
		return nil
	})
}
