package testfactory

import (
	"context"
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/knowledgefs/kfsdb/kfstype"
	"github.com/knowledgefs/kfsdb/memqueue"
	"github.com/knowledgefs/kfsdb/relay"
	"github.com/knowledgefs/kfsdb/repo"
	"github.com/knowledgefs/kfsdb/worker"
)

// relayAndWorker: attempts go through relay.RunOnce and a worker over
// memqueue, both on the database clock (no override).
func (tr *transitions) relayAndWorker(t *testing.T) {
	const n = 3
	ctx, cancel := context.WithTimeout(bg, time.Minute)
	defer cancel()
	r := repo.New(nil)
	log := slog.New(slog.DiscardHandler)
	pubs := map[uuid.UUID][2]string{}
	var ids []uuid.UUID
	for range n {
		s := NewScope(ctx, t, tr.env.Owner, nil)
		id, fp := s.Publication(ctx, t, tr.env.Owner, "candidate")
		pubs[s.KnowledgeSpaceID] = [2]string{id.String(), fp}
		res, err := r.Start(ctx, tr.env.App, s.StartParams())
		tr.ok(t, "Start", err, res.Attempt.ID)
		ids = append(ids, res.Attempt.ID)
	}
	q := memqueue.New()
	rl, err := relay.New(tr.env.App, q, &relay.Config{Logger: log, PollOnly: true, Repo: r})
	require.NoError(t, err)
	handler := worker.HandlerFunc(func(ctx context.Context, job *worker.Job) error {
		for _, cp := range kfstype.Checkpoints()[job.Attempt.Checkpoint.Rank()+1:] {
			switch cp {
			case kfstype.CheckpointPublished:
				return nil
			case kfstype.CheckpointProjectionBuilt:
				p := pubs[job.Attempt.KnowledgeSpaceID]
				if err := job.BindCandidate(ctx, cp, uuid.MustParse(p[0]), p[1]); err != nil {
					return err
				}
			default:
				if err := job.Advance(ctx, cp); err != nil {
					return err
				}
			}
		}
		return nil
	})
	w, err := worker.New(tr.env.App, q, handler, &worker.Config{Logger: log, Repo: r})
	require.NoError(t, err)

	claimed, err := rl.RunOnce(ctx)
	tr.ok(t, "relay.RunOnce", err, uuid.Nil)
	require.Equal(t, n, claimed)
	for range n {
		msg, err := q.Receive(ctx)
		require.NoError(t, err)
		res := w.Process(ctx, msg)
		require.NoError(t, res.Err)
		require.Equal(t, worker.OutcomeCompleted, res.Outcome)
		tr.ok(t, "worker.Process", nil, res.AttemptID)
	}
	for _, id := range ids {
		rows := tr.requireState(t, id, kfstype.RunStateSucceeded)
		require.Equal(t, kfstype.CheckpointPublished, rows.Attempt.Checkpoint)
	}
}

func (tr *transitions) fullLifecycle(t *testing.T) {
	s := tr.scope(t)
	a := tr.start(t, s.StartParams())
	_, err := tr.repo.GetAttempt(bg, tr.env.App, &repo.GetAttemptParams{TenantID: s.TenantID, AttemptID: a.ID})
	tr.ok(t, "GetAttempt", err, uuid.Nil)
	lease := tr.acquire(t, tr.dispatch(t, a.ID))
	lease, err = tr.repo.Heartbeat(bg, tr.env.App, &repo.HeartbeatParams{Lease: lease})
	tr.ok(t, "Heartbeat", err, a.ID)
	tr.advanceTo(t, s, lease, kfstype.CheckpointSmokeEvalPassed)
	_, err = tr.repo.Complete(bg, tr.env.App, &repo.CompleteParams{Lease: lease})
	tr.ok(t, "Complete", err, a.ID)
	tr.requireState(t, a.ID, kfstype.RunStateSucceeded)

	_, _, err = tr.repo.GetAttemptWithOutbox(bg, tr.env.App, &repo.GetAttemptWithOutboxParams{TenantID: s.TenantID, AttemptID: a.ID})
	tr.ok(t, "GetAttemptWithOutbox", err, uuid.Nil)
	list, err := tr.repo.ListDocumentVersionAttempts(bg, tr.env.App, &repo.ListDocumentVersionAttemptsParams{
		TenantID: s.TenantID, KnowledgeSpaceID: s.KnowledgeSpaceID, DocumentAssetID: s.DocumentAssetID, DocumentVersion: s.DocumentVersion,
	})
	tr.ok(t, "ListDocumentVersionAttempts", err, uuid.Nil)
	require.Len(t, list, 1)
	_, err = tr.repo.CountLiveAttempts(bg, tr.env.App, &repo.CountLiveAttemptsParams{TenantID: s.TenantID})
	tr.ok(t, "CountLiveAttempts", err, uuid.Nil)
}

func (tr *transitions) deferredStart(t *testing.T) {
	s := tr.scope(t)
	p := s.StartParams()
	p.Deferred = true
	a := tr.start(t, p)
	ref := s.Ref(a.ID)
	_, err := tr.repo.ReleaseDeferred(bg, tr.env.App, &repo.ReleaseDeferredParams{AttemptRef: ref})
	tr.ok(t, "ReleaseDeferred", err, a.ID)
	_, err = tr.repo.Cancel(bg, tr.env.App, &repo.CancelParams{AttemptRef: ref})
	tr.ok(t, "Cancel", err, a.ID)
	tr.requireState(t, a.ID, kfstype.RunStateCanceled)
}

func (tr *transitions) cancelAndSupersede(t *testing.T) {
	s := tr.scope(t)
	a := tr.start(t, s.StartParams())
	ref := s.Ref(a.ID)
	stale := a.RowVersion + 1
	ref.ExpectedRowVersion = &stale
	_, err := tr.repo.Cancel(bg, tr.env.App, &repo.CancelParams{AttemptRef: ref})
	tr.refused(t, "Cancel", err, repo.ErrStaleRowVersion)
	ref.ExpectedRowVersion = &a.RowVersion
	reason := "user canceled"
	_, err = tr.repo.Cancel(bg, tr.env.App, &repo.CancelParams{AttemptRef: ref, Reason: &reason})
	tr.ok(t, "Cancel", err, a.ID)
	tr.requireState(t, a.ID, kfstype.RunStateCanceled)

	b := tr.start(t, s.StartParams())
	lease := tr.acquire(t, tr.dispatch(t, b.ID))
	reason = "newer document version"
	_, err = tr.repo.Supersede(bg, tr.env.App, &repo.SupersedeParams{AttemptRef: s.Ref(b.ID), Reason: &reason})
	tr.ok(t, "Supersede", err, b.ID)
	tr.requireState(t, b.ID, kfstype.RunStateSuperseded)
	_, err = tr.repo.Heartbeat(bg, tr.env.App, &repo.HeartbeatParams{Lease: lease})
	tr.refused(t, "Heartbeat", err, repo.ErrLeaseLost)
}

func (tr *transitions) failAndRetry(t *testing.T) {
	s := tr.scope(t)
	a := tr.start(t, s.StartParams())
	lease := tr.acquire(t, tr.dispatch(t, a.ID))
	_, err := tr.repo.Fail(bg, tr.env.App, &repo.FailParams{Lease: lease, ErrorCode: "DOCUMENT_COMPILATION_FAILED", ErrorMessage: "parser crashed"})
	tr.ok(t, "Fail", err, a.ID)
	tr.requireState(t, a.ID, kfstype.RunStateFailed)

	ref := s.Ref(a.ID)
	_, err = tr.repo.RetryFailed(bg, tr.env.App, &repo.RetryFailedParams{AttemptRef: ref})
	tr.ok(t, "RetryFailed", err, a.ID)
	lease = tr.acquire(t, tr.dispatch(t, a.ID))
	_, err = tr.repo.ScheduleRetry(bg, tr.env.App, &repo.ScheduleRetryParams{
		Lease: lease, RetryDelay: 5 * time.Second, ErrorCode: "DOCUMENT_COMPILATION_RETRYABLE", ErrorMessage: "timeout",
	})
	tr.ok(t, "ScheduleRetry", err, a.ID)
	tr.requireState(t, a.ID, kfstype.RunStateRetryWait)

	tr.clock.Advance(6 * time.Second)
	lease = tr.acquire(t, tr.dispatch(t, a.ID))
	tr.advanceTo(t, s, lease, kfstype.CheckpointSmokeEvalPassed)
	_, err = tr.repo.Complete(bg, tr.env.App, &repo.CompleteParams{Lease: lease})
	tr.ok(t, "Complete", err, a.ID)
	tr.requireState(t, a.ID, kfstype.RunStateSucceeded)
}

func (tr *transitions) exhausted(t *testing.T) {
	s := tr.scope(t)
	p := s.StartParams()
	p.MaxExecutionAttempts = 1
	a := tr.start(t, p)
	lease := tr.acquire(t, tr.dispatch(t, a.ID))
	tr.clock.Advance(repo.LeaseDurationDefault + time.Second) // the worker is lost
	_, err := tr.repo.Heartbeat(bg, tr.env.App, &repo.HeartbeatParams{Lease: lease})
	tr.refused(t, "Heartbeat", err, repo.ErrLeaseLost)
	d := tr.dispatch(t, a.ID) // the relay redelivers at the lease expiry
	_, _, err = tr.repo.AcquireLease(bg, tr.env.App, &repo.AcquireLeaseParams{Delivery: *d, WorkerID: "worker-2"})
	tr.refused(t, "AcquireLease", err, repo.ErrAttemptsExhausted)
	_, err = tr.repo.FailExhausted(bg, tr.env.App, &repo.FailExhaustedParams{Delivery: *d})
	tr.ok(t, "FailExhausted", err, a.ID)
	rows := tr.requireState(t, a.ID, kfstype.RunStateFailed)
	require.Equal(t, "EXECUTION_ATTEMPTS_EXHAUSTED", *rows.Attempt.LastErrorCode)
}

func (tr *transitions) backoffAndDeadLetter(t *testing.T) {
	s := tr.scope(t)
	a := tr.start(t, s.StartParams())
	for i, want := range []kfstype.OutboxStatus{kfstype.OutboxStatusPending, kfstype.OutboxStatusDead} {
		m := tr.claim(t, a.ID)
		o, err := tr.repo.ReleaseOutbox(bg, tr.env.App, &repo.ReleaseOutboxParams{
			OutboxID: m.ID, LockToken: *m.LockToken, Backoff: time.Second, MaxDispatchAttempts: 2,
			LastError: fmt.Sprintf("broker down (%d)", i+1),
		})
		tr.ok(t, "ReleaseOutbox", err, a.ID)
		require.Equal(t, want, o.Status)
		tr.clock.Advance(2 * time.Second)
	}
	rows := tr.requireState(t, a.ID, kfstype.RunStateFailed)
	require.Equal(t, "OUTBOX_DEAD", *rows.Attempt.LastErrorCode)
}

func (tr *transitions) headConflict(t *testing.T) {
	s := tr.scope(t)
	s.SetHead(bg, t, tr.env.Owner, 3)
	_, err := tr.repo.Start(bg, tr.env.App, s.StartParams())
	tr.refused(t, "Start", err, repo.ErrHeadConflict)
	p := s.StartParams()
	p.BaseHeadRevision = 3
	a := tr.start(t, p)
	_, err = tr.repo.Supersede(bg, tr.env.App, &repo.SupersedeParams{AttemptRef: s.Ref(a.ID)})
	tr.ok(t, "Supersede", err, a.ID)
}

func (tr *transitions) purge(t *testing.T) {
	require.NotEmpty(t, tr.tenant, "runs after the other scenarios")
	var before int
	require.NoError(t, tr.env.Owner.QueryRow(bg,
		`SELECT count(*) FROM document_compilation_attempts WHERE tenant_id = $1 AND active_slot IS NULL`, tr.tenant).Scan(&before))
	require.Positive(t, before)
	n, err := tr.repo.Purge(bg, tr.env.App, &repo.PurgeParams{TenantID: tr.tenant, CompletedBefore: tr.clock.Advance(time.Second)})
	tr.ok(t, "Purge", err, uuid.Nil)
	require.Equal(t, before, n)
	var outbox int
	require.NoError(t, tr.env.Owner.QueryRow(bg, `SELECT count(*) FROM document_compilation_outbox o
		JOIN document_compilation_attempts a ON a.id = o.attempt_id WHERE a.tenant_id = $1`, tr.tenant).Scan(&outbox))
	require.Zero(t, outbox)
}
