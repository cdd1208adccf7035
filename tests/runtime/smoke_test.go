package runtime_test

import (
	"context"
	"errors"
	"log/slog"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/knowledgefs/kfsdb/kfstype"
	"github.com/knowledgefs/kfsdb/memqueue"
	"github.com/knowledgefs/kfsdb/relay"
	"github.com/knowledgefs/kfsdb/repo"
	"github.com/knowledgefs/kfsdb/tests/pgtest"
	"github.com/knowledgefs/kfsdb/tests/testfactory"
	"github.com/knowledgefs/kfsdb/worker"
)

// compile is a handler that walks every checkpoint, binding a candidate
// publication the test created for the attempt's space.
func compile(pubs map[string][2]string) worker.HandlerFunc {
	return func(ctx context.Context, job *worker.Job) error {
		for _, cp := range kfstype.Checkpoints()[job.Attempt.Checkpoint.Rank()+1:] {
			if cp == kfstype.CheckpointPublished {
				return nil
			}
			if cp == kfstype.CheckpointProjectionBuilt && job.Attempt.CandidatePublicationID == nil {
				p := pubs[job.Attempt.KnowledgeSpaceID.String()]
				if err := job.BindCandidate(ctx, cp, mustUUID(p[0]), p[1]); err != nil {
					return err
				}
				continue
			}
			if err := job.Advance(ctx, cp); err != nil {
				return err
			}
		}
		return nil
	}
}

func TestRelayAndWorkerCompleteAttempts(t *testing.T) {
	t.Parallel()
	db := pgtest.NewDB(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	r := repo.New(nil)
	log := slog.New(slog.DiscardHandler)

	const n = 20
	pubs := map[string][2]string{}
	var attempts []*kfstype.Attempt
	for range n {
		s := testfactory.NewScope(ctx, t, db.Pool, nil)
		id, fp := s.Publication(ctx, t, db.Pool, "candidate")
		pubs[s.KnowledgeSpaceID.String()] = [2]string{id.String(), fp}
		res, err := r.Start(ctx, db.Pool, s.StartParams())
		require.NoError(t, err)
		attempts = append(attempts, res.Attempt)
	}

	q := memqueue.New()
	rl, err := relay.New(db.Pool, q, &relay.Config{Logger: log, PollInterval: 50 * time.Millisecond})
	require.NoError(t, err)
	w, err := worker.New(db.Pool, q, compile(pubs), &worker.Config{Logger: log, Concurrency: 4})
	require.NoError(t, err)
	done := make(chan error, 2)
	go func() { done <- rl.Run(ctx) }()
	go func() { done <- w.Run(ctx) }()

	require.Eventually(t, func() bool {
		counts := map[kfstype.RunState]int{}
		for _, a := range attempts {
			rows := testfactory.RequireInvariants(ctx, t, db.Pool, a.ID)
			counts[rows.Attempt.RunState]++
		}
		return counts[kfstype.RunStateSucceeded] == n
	}, 20*time.Second, 50*time.Millisecond)
	cancel()
	for range 2 {
		require.True(t, errors.Is(<-done, context.Canceled))
	}
}
