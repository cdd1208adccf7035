package worker

import (
	"context"
	"errors"
	"log/slog"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/knowledgefs/kfsdb/kfstype"
	"github.com/knowledgefs/kfsdb/repo"
)

// TestHandlerStopsAtLeaseExpiry: a handler's context ends when its lease
// expires by the worker's clock, without a heartbeat answering, whatever
// the heartbeat's schedule. Here the next heartbeat is due long after the
// lease's end (as when one fails at once with no route to the database and
// the next tick is most of an interval away) and the database is
// unreachable: the context must still end at the expiry, with cause
// repo.ErrLeaseLost. tests/partition checks the same on a worker process
// cut off from its database.
func TestHandlerStopsAtLeaseExpiry(t *testing.T) {
	pool := unreachablePool(t)

	// As read on this host's clock, the database's ExpiresAt is an hour
	// away when this host's clock runs an hour behind the database's: the
	// lease's LocalDeadline (the Repo's send time plus the duration) must
	// stop the handler all the same.
	for _, tc := range []struct {
		name  string
		lease func(expires time.Time) (expiresAt, localDeadline time.Time)
	}{
		{"ExpiresAt", func(expires time.Time) (time.Time, time.Time) { return expires, time.Time{} }},
		{"LocalDeadlineWithTheDatabaseClockAnHourAhead", func(expires time.Time) (time.Time, time.Time) {
			return expires.Add(time.Hour), expires
		}},
	} {
		t.Run(tc.name, func(t *testing.T) { stopsAtExpiry(t, pool, tc.lease) })
	}
}

// stopsAtExpiry runs a handler that waits for its context under a lease
// that ends 200 ms from now by this host's clock, with the database
// unreachable and the next heartbeat 50 minutes away.
func stopsAtExpiry(t *testing.T, pool *pgxpool.Pool, lease func(expires time.Time) (expiresAt, localDeadline time.Time)) {
	type ended struct {
		at    time.Time
		cause error
	}
	endedCh := make(chan ended, 1)
	h := HandlerFunc(func(ctx context.Context, _ *Job) error {
		<-ctx.Done()
		endedCh <- ended{time.Now(), context.Cause(ctx)}
		return ctx.Err()
	})
	cfg := (&Config{LeaseDuration: time.Hour, HeartbeatInterval: 50 * time.Minute, Logger: slog.New(slog.DiscardHandler)}).withDefaults()
	w := &Worker{cfg: cfg, pool: pool, handler: h, log: cfg.Logger}
	id := uuid.New()
	expires := time.Now().Add(200 * time.Millisecond)
	job := &Job{Attempt: &kfstype.Attempt{ID: id}, repo: cfg.Repo, pool: pool}
	expiresAt, localDeadline := lease(expires)
	job.lease.Store(&repo.Lease{AttemptID: id, WorkerID: cfg.ID, Token: uuid.New(), ExpiresAt: expiresAt, LocalDeadline: localDeadline})

	lostCh := make(chan bool, 1)
	go func() {
		lostCh <- w.runWithHeartbeat(context.Background(), job, nil, w.log, nil).lost
	}()
	select {
	case e := <-endedCh:
		if e.at.Before(expires) {
			t.Fatalf("the handler's context ended at %s, before its lease expired at %s", e.at, expires)
		}
		if !errors.Is(e.cause, repo.ErrLeaseLost) {
			t.Fatalf("the handler's context ended with cause %v, want repo.ErrLeaseLost", e.cause)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the handler's context was still live 30 s after its lease expired (the next heartbeat is 50 minutes away)")
	}
	if !<-lostCh {
		t.Fatal("runWithHeartbeat did not report the lease lost")
	}
}
