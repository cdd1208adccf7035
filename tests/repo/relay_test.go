package repo_test

import (
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/knowledgefs/kfsdb/kfstype"
	"github.com/knowledgefs/kfsdb/repo"
	"github.com/knowledgefs/kfsdb/tests/testfactory"
)

// Helpers shared by the relay's and the worker's test files carry an rw
// prefix: relay_test.go and worker_test.go hold them.

// rwRows reads an attempt's rows and checks every invariant.
func (b *testBundle) rwRows(t *testing.T, attemptID uuid.UUID) *testfactory.Rows {
	t.Helper()
	return testfactory.RequireInvariants(b.ctx, t, b.db.Pool, attemptID)
}

// rwStart starts an attempt in a fresh scope; opts tunes its Start.
func (b *testBundle) rwStart(t *testing.T, opts func(*repo.StartParams)) (*testfactory.Scope, *kfstype.Attempt) {
	t.Helper()
	s := b.scope(t)
	p := s.StartParams()
	if opts != nil {
		opts(p)
	}
	res, err := b.repo.Start(b.ctx, b.db.Pool, p)
	require.NoError(t, err)
	require.True(t, res.Created)
	b.rwRows(t, res.Attempt.ID)
	return s, res.Attempt
}

// rwClaim claims every due row for relayID and returns them by attempt.
func (b *testBundle) rwClaim(t *testing.T, relayID string) map[uuid.UUID]*kfstype.OutboxMessage {
	t.Helper()
	msgs, err := b.repo.ClaimOutbox(b.ctx, b.db.Pool, &repo.ClaimParams{RelayID: relayID, BatchSize: repo.MaxBatchSize})
	require.NoError(t, err)
	out := make(map[uuid.UUID]*kfstype.OutboxMessage, len(msgs))
	for _, m := range msgs {
		out[m.AttemptID] = m
		b.rwRows(t, m.AttemptID)
	}
	return out
}

// rwDispatch claims every due row, marks the attempt's row dispatched with
// the given job ids and returns the delivery a worker receives. Other
// claimed rows stay dispatching.
func (b *testBundle) rwDispatch(t *testing.T, attemptID uuid.UUID, job string, ext *string) *repo.Delivery {
	t.Helper()
	m := b.rwClaim(t, "relay-setup")[attemptID]
	require.NotNil(t, m, "outbox row of attempt %s not due", attemptID)
	res, err := b.repo.MarkDispatched(b.ctx, b.db.Pool, &repo.MarkDispatchedParams{Dispatches: []repo.Dispatch{{
		OutboxID: m.ID, LockToken: *m.LockToken, QueueJobID: job, ExternalJobID: ext,
	}}})
	require.NoError(t, err)
	require.Len(t, res.Marked, 1)
	b.rwRows(t, attemptID)
	return &repo.Delivery{AttemptID: attemptID, QueueJobID: job, ExternalJobID: ext}
}

// rwAcquire acquires the lease of a delivery and checks the invariants.
func (b *testBundle) rwAcquire(t *testing.T, del *repo.Delivery, workerID string) *repo.Lease {
	t.Helper()
	_, lease, err := b.repo.AcquireLease(b.ctx, b.db.Pool, &repo.AcquireLeaseParams{Delivery: *del, WorkerID: workerID})
	require.NoError(t, err)
	b.rwRows(t, del.AttemptID)
	return lease
}

// rwRunning starts an attempt (opts tunes Start) and takes its lease as
// worker-test.
func (b *testBundle) rwRunning(t *testing.T, opts func(*repo.StartParams)) (*testfactory.Scope, *repo.Lease, *repo.Delivery) {
	t.Helper()
	s, a := b.rwStart(t, opts)
	del := b.rwDispatch(t, a.ID, "job-"+uuid.NewString(), nil)
	return s, b.rwAcquire(t, del, "worker-test"), del
}
