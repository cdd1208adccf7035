package repo_test

import (
	"context"
	"fmt"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/knowledgefs/kfsdb/kfstype"
	"github.com/knowledgefs/kfsdb/repo"
	"github.com/knowledgefs/kfsdb/tests/testfactory"
)

// statementCounter is a pgx QueryTracer counting the statements sent.
type statementCounter struct{ n atomic.Int64 }

func (c *statementCounter) TraceQueryStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryStartData) context.Context {
	c.n.Add(1)
	return ctx
}

func (c *statementCounter) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

// count runs f and returns how many statements it sent through the pool.
func (c *statementCounter) count(f func()) int64 {
	before := c.n.Load()
	f()
	return c.n.Load() - before
}

// TestStatementsPerTransition pins how many statements each transition
// sends on its happy path (one) and when refused (one more, read-only, to
// say why). It fails if a change adds a round trip. With
// KFS_STATEMENTS_TABLE=path it writes docs/ADOPTING.md's table there.
func TestStatementsPerTransition(t *testing.T) {
	b := setup(t)
	cfg, err := pgxpool.ParseConfig(b.db.URL)
	require.NoError(t, err)
	counter := &statementCounter{}
	cfg.ConnConfig.Tracer = counter
	pool, err := pgxpool.NewWithConfig(b.ctx, cfg)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	ctx := b.ctx
	r := b.repo
	drv := &testfactory.Driver{Repo: r, DB: pool}

	type row struct {
		transition string
		happy      int64
		refused    int64
	}
	var rows []row
	measure := func(name string, happy, refused func()) {
		t.Helper()
		rw := row{transition: name, happy: counter.count(happy)}
		if refused != nil {
			rw.refused = counter.count(refused)
		}
		rows = append(rows, rw)
	}

	s := testfactory.NewScope(ctx, t, pool, nil)
	var started *kfstype.Attempt
	measure("Start", func() {
		res, err := r.Start(ctx, pool, s.StartParams())
		require.NoError(t, err)
		started = res.Attempt
	}, func() {
		res, err := r.Start(ctx, pool, s.StartParams()) // live attempt exists: returned as is
		require.NoError(t, err)
		require.False(t, res.Created)
	})

	sd := testfactory.NewScope(ctx, t, pool, nil)
	pd := sd.StartParams()
	pd.Deferred = true
	deferred, err := r.Start(ctx, pool, pd)
	require.NoError(t, err)
	refD := sd.Ref(deferred.Attempt.ID)
	measure("ReleaseDeferred", func() {
		_, err := r.ReleaseDeferred(ctx, pool, &repo.ReleaseDeferredParams{AttemptRef: refD})
		require.NoError(t, err)
	}, func() {
		_, err := r.ReleaseDeferred(ctx, pool, &repo.ReleaseDeferredParams{AttemptRef: refD})
		require.ErrorIs(t, err, repo.ErrInvalidTransition)
	})

	var msgs []*kfstype.OutboxMessage
	measure("ClaimOutbox (batch)", func() {
		msgs, err = r.ClaimOutbox(ctx, pool, &repo.ClaimOutboxParams{RelayID: "relay", BatchSize: 100})
		require.NoError(t, err)
		require.Len(t, msgs, 2)
	}, nil)
	measure("MarkDispatched (batch)", func() {
		var ds []repo.Dispatch
		for i, m := range msgs {
			ds = append(ds, repo.Dispatch{OutboxID: m.ID, LockToken: *m.LockToken, QueueJobID: fmt.Sprintf("job-%d", i)})
		}
		res, err := r.MarkDispatched(ctx, pool, &repo.MarkDispatchedParams{Dispatches: ds})
		require.NoError(t, err)
		require.Len(t, res.Marked, 2)
	}, nil)
	jobOf := map[string]string{}
	for i, m := range msgs {
		jobOf[m.AttemptID.String()] = fmt.Sprintf("job-%d", i)
	}

	var lease *repo.Lease
	del := &repo.Delivery{AttemptID: started.ID, QueueJobID: jobOf[started.ID.String()]}
	measure("AcquireLease", func() {
		_, lease, err = r.AcquireLease(ctx, pool, &repo.AcquireLeaseParams{Delivery: *del, WorkerID: "w"})
		require.NoError(t, err)
	}, func() {
		_, _, err := r.AcquireLease(ctx, pool, &repo.AcquireLeaseParams{Delivery: repo.Delivery{AttemptID: started.ID, QueueJobID: "stale"}, WorkerID: "w"})
		require.ErrorIs(t, err, repo.ErrDeliveryMismatch)
	})
	stale := *lease
	stale.WorkerID = "other"
	measure("Heartbeat", func() {
		_, err := r.Heartbeat(ctx, pool, &repo.HeartbeatParams{Lease: lease})
		require.NoError(t, err)
	}, func() {
		_, err := r.Heartbeat(ctx, pool, &repo.HeartbeatParams{Lease: &stale})
		require.ErrorIs(t, err, repo.ErrLeaseLost)
	})
	measure("Advance", func() {
		_, err := r.Advance(ctx, pool, &repo.AdvanceParams{Lease: lease, Checkpoint: kfstype.CheckpointParsed})
		require.NoError(t, err)
	}, func() {
		_, err := r.Advance(ctx, pool, &repo.AdvanceParams{Lease: lease, Checkpoint: kfstype.CheckpointNodesGenerated})
		require.ErrorIs(t, err, repo.ErrInvalidTransition)
	})
	measure("AdvanceTo", func() {
		_, err := r.AdvanceTo(ctx, pool, &repo.AdvanceToParams{Lease: lease, Checkpoint: kfstype.CheckpointNodesGenerated})
		require.NoError(t, err)
	}, func() {
		_, err := r.AdvanceTo(ctx, pool, &repo.AdvanceToParams{Lease: lease, Checkpoint: kfstype.CheckpointParsed})
		require.ErrorIs(t, err, repo.ErrInvalidTransition)
	})
	candID, candFP := s.Publication(ctx, t, pool, "candidate")
	_, err = r.AdvanceTo(ctx, pool, &repo.AdvanceToParams{Lease: lease, Checkpoint: kfstype.CheckpointSmokeEvalPassed, CandidatePublicationID: &candID, CandidateFingerprint: &candFP})
	require.NoError(t, err)
	measure("Complete", func() {
		_, err := r.Complete(ctx, pool, &repo.CompleteParams{Lease: lease})
		require.NoError(t, err)
	}, func() {
		_, err := r.Complete(ctx, pool, &repo.CompleteParams{Lease: lease})
		require.ErrorIs(t, err, repo.ErrLeaseLost)
	})

	// CompleteThrough, from queued in one write, on attempts of their own;
	// refused: no candidate bound or given.
	s5, s6 := testfactory.NewScope(ctx, t, pool, nil), testfactory.NewScope(ctx, t, pool, nil)
	_, lease5, _ := drv.Running(ctx, t, s5, nil)
	_, lease6, _ := drv.Running(ctx, t, s6, nil)
	id5, fp5 := s5.Publication(ctx, t, pool, "candidate")
	measure("CompleteThrough", func() {
		_, err := r.CompleteThrough(ctx, pool, &repo.CompleteThroughParams{Lease: lease5, CandidatePublicationID: &id5, CandidateFingerprint: &fp5})
		require.NoError(t, err)
	}, func() {
		_, err := r.CompleteThrough(ctx, pool, &repo.CompleteThroughParams{Lease: lease6})
		require.ErrorIs(t, err, repo.ErrCandidateRejected)
	})

	// The second (released) attempt: retry, fail, manual retry, cancel.
	other := deferred.Attempt
	del2 := &repo.Delivery{AttemptID: other.ID, QueueJobID: jobOf[other.ID.String()]}
	_, lease2, err := r.AcquireLease(ctx, pool, &repo.AcquireLeaseParams{Delivery: *del2, WorkerID: "w"})
	require.NoError(t, err)
	measure("ScheduleRetry", func() {
		_, err := r.ScheduleRetry(ctx, pool, &repo.ScheduleRetryParams{Lease: lease2, RetryDelay: time.Millisecond, ErrorCode: "E", ErrorMessage: "m"})
		require.NoError(t, err)
	}, func() {
		_, err := r.ScheduleRetry(ctx, pool, &repo.ScheduleRetryParams{Lease: lease2, RetryDelay: time.Millisecond, ErrorCode: "E", ErrorMessage: "m"})
		require.ErrorIs(t, err, repo.ErrLeaseLost)
	})
	b.clock.Advance(time.Second)
	m := drv.Claim(ctx, t, other.ID)
	measure("ReleaseOutbox", func() {
		_, err := r.ReleaseOutbox(ctx, pool, &repo.ReleaseOutboxParams{OutboxID: m.ID, LockToken: *m.LockToken, Backoff: time.Millisecond, LastError: "down"})
		require.NoError(t, err)
	}, func() {
		_, err := r.ReleaseOutbox(ctx, pool, &repo.ReleaseOutboxParams{OutboxID: m.ID, LockToken: *m.LockToken, Backoff: time.Millisecond, LastError: "down"})
		require.ErrorIs(t, err, repo.ErrOutboxLockLost)
	})
	b.clock.Advance(time.Second)
	del2 = drv.Dispatch(ctx, t, other.ID, nil)
	_, lease2, err = r.AcquireLease(ctx, pool, &repo.AcquireLeaseParams{Delivery: *del2, WorkerID: "w"})
	require.NoError(t, err)
	measure("Fail", func() {
		_, err := r.Fail(ctx, pool, &repo.FailParams{Lease: lease2, ErrorCode: "E", ErrorMessage: "m"})
		require.NoError(t, err)
	}, func() {
		_, err := r.Fail(ctx, pool, &repo.FailParams{Lease: lease2, ErrorCode: "E", ErrorMessage: "m"})
		require.ErrorIs(t, err, repo.ErrLeaseLost)
	})
	ref2 := sd.Ref(other.ID)
	measure("RetryFailed", func() {
		_, err := r.RetryFailed(ctx, pool, &repo.RetryFailedParams{AttemptRef: ref2})
		require.NoError(t, err)
	}, func() {
		_, err := r.RetryFailed(ctx, pool, &repo.RetryFailedParams{AttemptRef: ref2})
		require.ErrorIs(t, err, repo.ErrInvalidTransition)
	})
	measure("Cancel", func() {
		_, err := r.Cancel(ctx, pool, &repo.CancelParams{AttemptRef: ref2})
		require.NoError(t, err)
	}, func() {
		_, err := r.Cancel(ctx, pool, &repo.CancelParams{AttemptRef: ref2})
		require.ErrorIs(t, err, repo.ErrInvalidTransition)
	})
	s3 := testfactory.NewScope(ctx, t, pool, nil)
	third := drv.Start(ctx, t, s3, nil)
	ref3 := s3.Ref(third.ID)
	measure("Supersede", func() {
		_, err := r.Supersede(ctx, pool, &repo.SupersedeParams{AttemptRef: ref3})
		require.NoError(t, err)
	}, func() {
		_, err := r.Supersede(ctx, pool, &repo.SupersedeParams{AttemptRef: ref3})
		require.ErrorIs(t, err, repo.ErrInvalidTransition)
	})

	// FailExhausted: one execution allowed, lease lost, redelivered.
	s4 := testfactory.NewScope(ctx, t, pool, nil)
	p4 := s4.StartParams()
	p4.MaxExecutionAttempts = 1
	res4, err := r.Start(ctx, pool, p4)
	require.NoError(t, err)
	del4 := drv.Dispatch(ctx, t, res4.Attempt.ID, nil)
	_, _, err = r.AcquireLease(ctx, pool, &repo.AcquireLeaseParams{Delivery: *del4, WorkerID: "w", LeaseDuration: time.Second})
	require.NoError(t, err)
	b.clock.Advance(2 * time.Second)
	del4 = drv.Dispatch(ctx, t, res4.Attempt.ID, nil)
	measure("FailExhausted", func() {
		_, err := r.FailExhausted(ctx, pool, &repo.FailExhaustedParams{Delivery: *del4})
		require.NoError(t, err)
	}, func() {
		_, err := r.FailExhausted(ctx, pool, &repo.FailExhaustedParams{Delivery: *del4})
		require.ErrorIs(t, err, repo.ErrInvalidTransition)
	})
	measure("Purge (batch)", func() {
		n, err := r.Purge(ctx, pool, &repo.PurgeParams{TenantID: s4.TenantID, CompletedBefore: b.clock.Now().Add(time.Hour)})
		require.NoError(t, err)
		require.Equal(t, 1, n)
	}, nil)

	var table strings.Builder
	table.WriteString("| transition | statements (applied) | statements (refused) |\n|---|---|---|\n")
	for _, rw := range rows {
		refused := "–"
		if rw.refused > 0 {
			refused = fmt.Sprint(rw.refused)
		}
		fmt.Fprintf(&table, "| %s | %d | %s |\n", rw.transition, rw.happy, refused)
	}
	t.Log("\n" + table.String())
	if path := os.Getenv("KFS_STATEMENTS_TABLE"); path != "" {
		require.NoError(t, os.WriteFile(path, []byte(table.String()), 0o644))
	}
	for _, rw := range rows {
		require.EqualValues(t, 1, rw.happy, "%s sends more than one statement when it applies", rw.transition)
		if rw.transition == "Start" {
			require.EqualValues(t, 1, rw.refused, "Start of a live version returns the live attempt in its one statement")
			continue
		}
		if rw.refused > 0 {
			require.LessOrEqual(t, rw.refused, int64(2), "%s refusal: the statement plus one read", rw.transition)
		}
	}
}
