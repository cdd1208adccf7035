package loadgen

import (
	"context"
	"sync"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/knowledgefs/kfsdb/cmd/kfsdb/delivery"
	"github.com/knowledgefs/kfsdb/memqueue"
	"github.com/knowledgefs/kfsdb/pgsource"
	"github.com/knowledgefs/kfsdb/relay"
	"github.com/knowledgefs/kfsdb/repo"
	"github.com/knowledgefs/kfsdb/worker"
)

// runtime is what delivers a run's attempts: one worker with c.Workers
// slots, fed by its own pgsource (delivery.Postgres) or by a relay through
// the in-process memqueue (delivery.Relay).
type runtime struct {
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

// startRuntime starts the runtime; onAck is called for every delivery the
// worker acknowledges (after its outcome committed).
func startRuntime(ctx context.Context, pool *pgxpool.Pool, c *Config, r *repo.Repo, h worker.Handler, onAck func(uuid.UUID)) (*runtime, error) {
	rctx, cancel := context.WithCancel(ctx)
	rt := &runtime{cancel: cancel}
	var src worker.Source
	if c.Delivery == delivery.Relay {
		q := memqueue.New()
		rl, err := relay.New(pool, q, &relay.Config{Logger: c.Logger, Repo: r})
		if err != nil {
			cancel()
			return nil, err
		}
		rt.wg.Go(func() { _ = rl.Run(rctx) })
		src = &ackSource{Source: q, onAck: onAck}
	} else {
		ps, err := pgsource.New(pool, &pgsource.Config{Logger: c.Logger, Repo: r})
		if err != nil {
			cancel()
			return nil, err
		}
		src = newAckLeasingSource(ps, onAck)
	}
	wk, err := worker.New(pool, src, h, &worker.Config{Logger: c.Logger, Repo: r,
		Concurrency: c.Workers, SingleCompletions: c.SingleCompletions, PendingDeliveryWait: c.PendingDeliveryWait})
	if err != nil {
		rt.stop()
		return nil, err
	}
	rt.wg.Go(func() { _ = wk.Run(rctx) })
	return rt, nil
}

// stop ends the runtime and waits for it.
func (rt *runtime) stop() {
	rt.cancel()
	rt.wg.Wait()
}
