// Package otel traces kfsdb with OpenTelemetry, through the application's
// own TracerProvider:
//
//   - NewTracer is a pgx QueryTracer and BatchTracer: one CLIENT span per
//     statement, named after its sqlc query (Start, AcquireLease,
//     …), with the database semantic-convention attributes.
//   - TraceContext gives repo.StartParams.TraceContext: the caller's trace
//     context, which Start stores with the attempt in the same statement
//     (the outbox payload is fixed, so it travels beside it).
//   - WrapPublisher puts a PRODUCER span "publish document.compile" around
//     each relay publication, a child of the Start's context, and hands the
//     broker its own context in relay.Message.TraceContext.
//   - NewWorkerTracer (worker.Config.Tracer) puts a CONSUMER span "process
//     document.compile" around a delivery's handling, a child of the
//     context the message carries (the publication's, or with direct
//     delivery the Start's) and linked to it.
//
// So one attempt is one trace, from Start through completion. Wiring:
//
//	tr, _ := otel.NewTracer(tp, nil)        // pgxpool.Config.ConnConfig.Tracer = tr
//	p.TraceContext = otel.TraceContext(ctx) // repo.StartParams, inside the caller's span
//	pub, _ := otel.WrapPublisher(q, tp)     // relay.New(pool, pub, &relay.Config{TraceContexts: true})
//	wt, _ := otel.NewWorkerTracer(tp)       // worker.Config.Tracer = wt
//	src, _ := pgsource.New(pool, &pgsource.Config{TraceContexts: true})
//
// It is a module of its own so that importers of kfsdb's repo, relay and
// worker never get OpenTelemetry; this package itself uses only the API
// (the SDK is for its tests, in tests/adapters/otel). No span attribute holds a payload, a lease
// token, a lock token or statement arguments.
package otel

import (
	"context"
	"errors"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/knowledgefs/kfsdb/internal/nilvalue"
	"github.com/knowledgefs/kfsdb/kfstype"
)

// ScopeName is the instrumentation scope of every tracer this package
// takes from a TracerProvider.
const ScopeName = "github.com/knowledgefs/kfsdb/adapters/otel"

// kfsdb's own span attributes.
const (
	// AttemptIDKey is the attempt's id.
	AttemptIDKey = attribute.Key("kfsdb.attempt_id")
	// TenantIDKey is the attempt's tenant, once the worker leased it.
	TenantIDKey = attribute.Key("kfsdb.tenant_id")
	// OutcomeKey is what the worker did with a delivery (worker.Outcome).
	OutcomeKey = attribute.Key("kfsdb.outcome")
	// MessagingSystem is the messaging.system of kfsdb's spans: the outbox
	// is the system, whichever broker (or PostgreSQL itself) delivers.
	MessagingSystem = "kfsdb"
)

// ErrNilTracerProvider is returned by NewTracer, WrapPublisher and
// NewWorkerTracer when the TracerProvider is nil.
var ErrNilTracerProvider = errors.New("otel: TracerProvider is nil")

// w3c is the propagator of the stored and carried trace contexts: always
// W3C Trace Context, whatever the application's global propagator, since
// the database column and the message field hold exactly that.
var w3c propagation.TraceContext

// TraceContext returns the W3C trace context of ctx's span, for
// repo.StartParams.TraceContext; zero when ctx (nil included) has no
// valid span context, and Start then stores nothing.
func TraceContext(ctx context.Context) kfstype.TraceContext {
	if nilvalue.Is(ctx) || !trace.SpanContextFromContext(ctx).IsValid() {
		return kfstype.TraceContext{}
	}
	c := propagation.MapCarrier{}
	w3c.Inject(ctx, c)
	return kfstype.TraceContext{TraceParent: c.Get("traceparent"), TraceState: c.Get("tracestate")}
}

// spanContext is tc's span context (remote), invalid for a zero or
// malformed tc.
func spanContext(tc kfstype.TraceContext) trace.SpanContext {
	if tc.IsZero() {
		return trace.SpanContext{}
	}
	c := propagation.MapCarrier{"traceparent": tc.TraceParent}
	if tc.TraceState != "" {
		c["tracestate"] = tc.TraceState
	}
	return trace.SpanContextFromContext(w3c.Extract(context.Background(), c))
}
