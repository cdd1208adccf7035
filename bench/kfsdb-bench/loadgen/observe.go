package loadgen

import (
	"context"
	"maps"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/multitracer"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/knowledgefs/kfsdb/adapters/otel"
	"github.com/knowledgefs/kfsdb/adapters/prom"
	"github.com/knowledgefs/kfsdb/observe"
	"github.com/knowledgefs/kfsdb/relay"
	"github.com/knowledgefs/kfsdb/repo"
	"github.com/knowledgefs/kfsdb/worker"
)

// scrapeInterval is how often an observed run gathers its registry, as a
// Prometheus server scraping /metrics would.
const scrapeInterval = 5 * time.Second

// instruments are what Config.Observe turns on, wired as an application
// that watches kfsdb would: Prometheus metrics (the runtime's counters,
// the statement histogram and the backlog collector, gathered every
// scrapeInterval) and OpenTelemetry tracing (an SDK TracerProvider that
// samples every trace and batch-exports it to an exporter that counts and
// drops the spans, so the cost measured is kfsdb's and the SDK's, not a
// collector's), with every Start in a request span whose trace context
// Start stores. A nil *instruments is the run without them.
type instruments struct {
	reg     *prometheus.Registry
	metrics observe.Metrics
	tp      *sdktrace.TracerProvider
	request trace.Tracer
	worker  worker.Tracer
	spans   *countingExporter
	done    chan struct{}
	stopped chan struct{}
	once    sync.Once
}

// newInstruments sets the statement tracers on pcfg beside the run's own
// tracer (first, so its counts stay the run's).
func newInstruments(pcfg *pgxpool.Config) (*instruments, error) {
	in := &instruments{reg: prometheus.NewRegistry(), spans: &countingExporter{byName: map[string]int64{}},
		done: make(chan struct{}), stopped: make(chan struct{})}
	var err error
	if in.metrics, err = prom.New(in.reg, nil); err != nil {
		return nil, err
	}
	promTracer, err := prom.NewTracer(in.reg, nil)
	if err != nil {
		return nil, err
	}
	in.tp = sdktrace.NewTracerProvider(sdktrace.WithSampler(sdktrace.AlwaysSample()),
		sdktrace.WithBatcher(in.spans))
	otelTracer, err := otel.NewTracer(in.tp, nil)
	if err != nil {
		return nil, err
	}
	if in.worker, err = otel.NewWorkerTracer(in.tp); err != nil {
		return nil, err
	}
	in.request = in.tp.Tracer("kfsdb-bench")
	pcfg.ConnConfig.Tracer = multitracer.New(pcfg.ConnConfig.Tracer, promTracer, otelTracer)
	pcfg.MaxConns++ // the backlog sample
	return in, nil
}

// run registers the backlog collector and gathers the registry every
// scrapeInterval until stop.
func (in *instruments) run(pool *pgxpool.Pool) error {
	coll, err := prom.NewCollector(pool, nil)
	if err != nil {
		return err
	}
	if err := in.reg.Register(coll); err != nil {
		return err
	}
	go func() {
		defer close(in.stopped)
		tick := time.NewTicker(scrapeInterval)
		defer tick.Stop()
		for {
			select {
			case <-in.done:
				return
			case <-tick.C:
				_, _ = in.reg.Gather()
			}
		}
	}()
	return nil
}

// stop ends the gathering and flushes the spans; it returns the spans
// exported, by name. Later calls return the same.
func (in *instruments) stop() map[string]int64 {
	if in == nil {
		return nil
	}
	in.once.Do(func() {
		close(in.done)
		<-in.stopped
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = in.tp.Shutdown(ctx)
	})
	in.spans.mu.Lock()
	defer in.spans.mu.Unlock()
	return maps.Clone(in.spans.byName)
}

// startInSpan runs start inside a request span, with its trace context on
// p, as a traced application's request handler would; without
// instruments it just runs start.
func (in *instruments) startInSpan(ctx context.Context, p *repo.StartParams, start func(context.Context) error) error {
	if in == nil {
		return start(ctx)
	}
	ctx, span := in.request.Start(ctx, "request", trace.WithSpanKind(trace.SpanKindServer))
	defer span.End()
	p.TraceContext = otel.TraceContext(ctx)
	return start(ctx)
}

// runtimeMetrics is the Metrics for the relay, source and worker.
func (in *instruments) runtimeMetrics() observe.Metrics {
	if in == nil {
		return nil
	}
	return in.metrics
}

// workerTracer is worker.Config.Tracer.
func (in *instruments) workerTracer() worker.Tracer {
	if in == nil {
		return nil
	}
	return in.worker
}

// publisher wraps pub in a publish span.
func (in *instruments) publisher(pub relay.Publisher) (relay.Publisher, error) {
	if in == nil {
		return pub, nil
	}
	return otel.WrapPublisher(pub, in.tp)
}

// countingExporter counts the spans it is given by name and drops them.
type countingExporter struct {
	mu     sync.Mutex
	byName map[string]int64
}

func (e *countingExporter) ExportSpans(_ context.Context, spans []sdktrace.ReadOnlySpan) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, s := range spans {
		e.byName[s.Name()]++
	}
	return nil
}

func (e *countingExporter) Shutdown(context.Context) error { return nil }
