package docexample_test

import (
	"context"

	"github.com/knowledgefs/kfsdb/kfsdbtest"
	"github.com/knowledgefs/kfsdb/worker"
)

// myHandler stands for the application's handler in the package
// documentation's example: it binds the candidate publication it built
// and returns nil, so the worker completes the attempt.
func myHandler(candidate kfsdbtest.Publication) worker.Handler {
	return worker.HandlerFunc(func(_ context.Context, job *worker.Job) error {
		job.CompleteThrough(candidate.ID, candidate.Fingerprint)
		return nil
	})
}
