package runtime_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/knowledgefs/kfsdb/kfstype"
	"github.com/knowledgefs/kfsdb/relay"
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
	e := newEnv(t, 16)
	ctx, cancel := context.WithCancel(e.ctx)
	defer cancel()

	const n = 20
	pubs := map[string][2]string{}
	var attempts []*kfstype.Attempt
	for range n {
		s := testfactory.NewScope(ctx, t, e.pool, nil)
		id, fp := s.Publication(ctx, t, e.pool, "candidate")
		pubs[s.KnowledgeSpaceID.String()] = [2]string{id.String(), fp}
		res, err := e.repo.Start(ctx, e.pool, s.StartParams())
		require.NoError(t, err)
		attempts = append(attempts, res.Attempt)
	}

	rl := e.relay(t, relay.Config{PollInterval: 50 * time.Millisecond})
	w := e.worker(t, compile(pubs), worker.Config{Concurrency: 4})
	done := make(chan error, 2)
	go func() { done <- rl.Run(ctx) }()
	go func() { done <- w.Run(ctx) }()

	require.Eventually(t, func() bool {
		counts := map[kfstype.RunState]int{}
		for _, a := range attempts {
			rows := testfactory.RequireInvariants(ctx, t, e.pool, a.ID)
			counts[rows.Attempt.RunState]++
		}
		return counts[kfstype.RunStateSucceeded] == n
	}, hangAfter, 50*time.Millisecond)
	cancel()
	for range 2 {
		require.True(t, errors.Is(<-done, context.Canceled))
	}
}
