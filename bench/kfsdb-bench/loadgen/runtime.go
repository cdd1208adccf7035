package loadgen

import (
	"context"
	"strings"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/knowledgefs/kfsdb/adapters/natsjs"
	"github.com/knowledgefs/kfsdb/bench/kfsdb-bench/delivery"
	"github.com/knowledgefs/kfsdb/memqueue"
	"github.com/knowledgefs/kfsdb/pgsource"
	"github.com/knowledgefs/kfsdb/relay"
	"github.com/knowledgefs/kfsdb/repo"
	"github.com/knowledgefs/kfsdb/worker"
)

// runtime is what delivers a run's attempts: one worker with c.Workers
// slots, fed by its own pgsource (delivery.Postgres) or by a relay through
// the in-process memqueue (delivery.Relay) or NATS JetStream
// (delivery.NATS).
type runtime struct {
	cancel context.CancelFunc
	wg     sync.WaitGroup
	// nats is delivery.NATS's connection, with a stream of the run's own.
	nats *delivery.Broker
}

// startRuntime starts the runtime; onAck is called for every delivery the
// worker acknowledges (after its outcome committed).
func startRuntime(ctx context.Context, pool *pgxpool.Pool, c *Config, r *repo.Repo, in *instruments, h worker.Handler, onAck func(uuid.UUID)) (*runtime, error) {
	rctx, cancel := context.WithCancel(ctx)
	rt := &runtime{cancel: cancel}
	var src worker.Source
	if c.Delivery == delivery.Relay || c.Delivery == delivery.NATS {
		pub, relayed, err := rt.queue(ctx, c)
		if err != nil {
			rt.stop()
			return nil, err
		}
		if pub, err = in.publisher(pub); err != nil {
			rt.stop()
			return nil, err
		}
		rl, err := relay.New(pool, pub, &relay.Config{Logger: c.Logger, Repo: r, Metrics: in.runtimeMetrics(), TraceContexts: in != nil})
		if err != nil {
			rt.stop()
			return nil, err
		}
		rt.wg.Go(func() { _ = rl.Run(rctx) })
		src = &ackSource{Source: relayed, onAck: onAck}
	} else {
		ps, err := pgsource.New(pool, &pgsource.Config{Logger: c.Logger, Repo: r, Metrics: in.runtimeMetrics(), TraceContexts: in != nil,
			PollOnly: c.SourcePollInterval > 0, PollInterval: c.SourcePollInterval})
		if err != nil {
			cancel()
			return nil, err
		}
		src = newAckLeasingSource(ps, onAck)
	}
	wk, err := worker.New(pool, src, h, &worker.Config{Logger: c.Logger, Repo: r, Metrics: in.runtimeMetrics(), Tracer: in.workerTracer(),
		Concurrency: c.Workers, SingleCompletions: c.SingleCompletions, PendingDeliveryWait: c.PendingDeliveryWait})
	if err != nil {
		rt.stop()
		return nil, err
	}
	rt.wg.Go(func() { _ = wk.Run(rctx) })
	return rt, nil
}

// queue returns the relay's publisher and the workers' source: the
// in-process memqueue, or NATS JetStream with a stream of this run's own
// (deleted by stop), so that no message of an earlier run, whose attempts
// were in another scratch database, reaches this one.
func (rt *runtime) queue(ctx context.Context, c *Config) (relay.Publisher, worker.Source, error) {
	if c.Delivery == delivery.Relay {
		q := memqueue.New()
		return q, q, nil
	}
	run := strings.ToUpper(uuid.NewString()[:8])
	b, err := delivery.DialNATS(ctx, c.NATSURL, "kfsdb-bench", &natsjs.Config{
		Stream: "KFSDB_BENCH_" + run, SubjectPrefix: "kfsdb-bench." + run, Consumer: "kfsdb-bench"})
	if err != nil {
		return nil, nil, err
	}
	rt.nats = b
	pub, err := b.Publisher()
	if err != nil {
		return nil, nil, err
	}
	src, err := b.Source(ctx)
	if err != nil {
		return nil, nil, err
	}
	return pub, src, nil
}

// stop ends the runtime and waits for it.
func (rt *runtime) stop() {
	rt.cancel()
	rt.wg.Wait()
	if rt.nats != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = rt.nats.DeleteStream(ctx)
		rt.nats.Close()
		rt.nats = nil
	}
}
