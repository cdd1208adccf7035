package faultload

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/knowledgefs/kfsdb/kfstype"
	"github.com/knowledgefs/kfsdb/repo"
	"github.com/knowledgefs/kfsdb/tests/testfactory"
)

// probe asks questions with known answers about a canceled attempt all
// along the run: a fault must never change an answer, only delay it.
type probe struct {
	r     *Run
	scope *testfactory.Scope
	id    uuid.UUID
	wg    sync.WaitGroup
	calls atomic.Int64
	mu    sync.Mutex
	wrong examples
}

// newProbe makes the canceled attempt the probe asks about.
func newProbe(ctx context.Context, t testing.TB, r *Run) *probe {
	t.Helper()
	s := testfactory.NewScope(ctx, t, r.pool, nil)
	res, err := r.cfg.Repo.Start(ctx, r.pool, s.StartParams())
	require.NoError(t, err)
	_, err = r.cfg.Repo.Cancel(ctx, r.pool, &repo.CancelParams{AttemptRef: s.Ref(res.Attempt.ID)})
	require.NoError(t, err)
	return &probe{r: r, scope: s, id: res.Attempt.ID}
}

func (p *probe) start(ctx context.Context) { p.wg.Go(func() { p.run(ctx) }) }

func (p *probe) wait() { p.wg.Wait() }

// run asks until ctx ends: read the attempt (canceled), cancel it again
// (ErrInvalidTransition), heartbeat a made-up lease on it (ErrLeaseLost).
// Transient errors are retried; a final answer must be the right one.
func (p *probe) run(ctx context.Context) {
	r := p.r
	wrong := func(format string, args ...any) {
		p.mu.Lock()
		p.wrong.addf(format, args...)
		p.mu.Unlock()
	}
	lease := &repo.Lease{AttemptID: p.id, Token: uuid.New(), WorkerID: "probe", ExpiresAt: time.Now().Add(time.Hour)}
	for ctx.Err() == nil {
		p.calls.Add(3)
		a, err := retry(ctx, r, func(ctx context.Context) (*kfstype.Attempt, error) {
			return r.cfg.Repo.GetAttempt(ctx, r.pool, &repo.GetAttemptParams{TenantID: p.scope.TenantID, AttemptID: p.id})
		})
		if ctx.Err() != nil {
			return
		}
		if err != nil || a.RunState != kfstype.RunStateCanceled {
			wrong("GetAttempt: %v, %v", a, err)
		}
		_, err = retry(ctx, r, func(ctx context.Context) (*kfstype.Attempt, error) {
			return r.cfg.Repo.Cancel(ctx, r.pool, &repo.CancelParams{AttemptRef: p.scope.Ref(p.id)})
		})
		if ctx.Err() != nil {
			return
		}
		if !errors.Is(err, repo.ErrInvalidTransition) {
			wrong("Cancel: want ErrInvalidTransition, got %v", err)
		}
		_, err = retry(ctx, r, func(ctx context.Context) (*repo.Lease, error) {
			return r.cfg.Repo.Heartbeat(ctx, r.pool, &repo.HeartbeatParams{Lease: lease, LeaseDuration: r.cfg.LeaseDuration})
		})
		if ctx.Err() != nil {
			return
		}
		if !errors.Is(err, repo.ErrLeaseLost) {
			wrong("Heartbeat: want ErrLeaseLost, got %v", err)
		}
		sleep(ctx, 25*time.Millisecond)
	}
}

// retry calls f, each call bounded by a second, until it returns nil or
// an error repo.IsRetryable rejects, for at most StartRetryFor; it records
// each transient error.
func retry[T any](ctx context.Context, r *Run, f func(context.Context) (T, error)) (T, error) {
	deadline := time.Now().Add(r.cfg.StartRetryFor)
	for {
		cctx, cancel := context.WithTimeout(ctx, time.Second)
		v, err := f(cctx)
		cancel()
		if err == nil || !repo.IsRetryable(err) || time.Now().After(deadline) || ctx.Err() != nil {
			return v, err
		}
		r.errs.add(ctx, err)
		sleep(ctx, 50*time.Millisecond)
	}
}
