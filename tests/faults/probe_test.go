package faults_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/knowledgefs/kfsdb/kfstype"
	"github.com/knowledgefs/kfsdb/repo"
	"github.com/knowledgefs/kfsdb/tests/testfactory"
)

// probeAttempt makes a canceled attempt the probe asks about.
func (lr *loadRun) probeAttempt(ctx context.Context) *probeTarget {
	t := lr.t
	s := testfactory.NewScope(ctx, t, lr.pool, nil)
	res, err := lr.repo.Start(ctx, lr.pool, s.StartParams())
	require.NoError(t, err)
	_, err = lr.repo.Cancel(ctx, lr.pool, &repo.CancelParams{AttemptRef: s.Ref(res.Attempt.ID)})
	require.NoError(t, err)
	return &probeTarget{scope: s, id: res.Attempt.ID}
}

type probeTarget struct {
	scope *testfactory.Scope
	id    uuid.UUID
}

// runProbe asks three questions with known answers about the canceled
// probe attempt until ctx ends: read it (canceled), cancel it again
// (ErrInvalidTransition), heartbeat a made-up lease on it (ErrLeaseLost).
// Transient errors are retried; a final answer must be the right one.
func (lr *loadRun) runProbe(ctx context.Context, p *probeTarget) {
	wrong := func(format string, args ...any) {
		lr.mu.Lock()
		lr.probeWrong = append(lr.probeWrong, fmt.Sprintf(format, args...))
		lr.mu.Unlock()
	}
	lease := &repo.Lease{AttemptID: p.id, Token: uuid.New(), WorkerID: "probe", ExpiresAt: time.Now().Add(time.Hour)}
	for ctx.Err() == nil {
		lr.probeCalls.Add(3)
		a, err := retry(ctx, lr.t, &lr.errs, func(ctx context.Context) (*kfstype.Attempt, error) {
			return lr.repo.GetAttempt(ctx, lr.pool, &repo.GetAttemptParams{TenantID: p.scope.TenantID, AttemptID: p.id})
		})
		if ctx.Err() != nil {
			return
		}
		if err != nil || a.RunState != kfstype.RunStateCanceled {
			wrong("GetAttempt: %v, %v", a, err)
		}
		_, err = retry(ctx, lr.t, &lr.errs, func(ctx context.Context) (*kfstype.Attempt, error) {
			return lr.repo.Cancel(ctx, lr.pool, &repo.CancelParams{AttemptRef: p.scope.Ref(p.id)})
		})
		if ctx.Err() != nil {
			return
		}
		if !errors.Is(err, repo.ErrInvalidTransition) {
			wrong("Cancel: want ErrInvalidTransition, got %v", err)
		}
		_, err = retry(ctx, lr.t, &lr.errs, func(ctx context.Context) (*repo.Lease, error) {
			return lr.repo.Heartbeat(ctx, lr.pool, &repo.HeartbeatParams{Lease: lease, LeaseDuration: leaseDuration})
		})
		if ctx.Err() != nil {
			return
		}
		if !errors.Is(err, repo.ErrLeaseLost) {
			wrong("Heartbeat: want ErrLeaseLost, got %v", err)
		}
		select {
		case <-ctx.Done():
		case <-time.After(25 * time.Millisecond):
		}
	}
}
