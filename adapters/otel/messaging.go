package otel

import (
	"context"
	"errors"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/knowledgefs/kfsdb/internal/nilvalue"
	"github.com/knowledgefs/kfsdb/kfstype"
	"github.com/knowledgefs/kfsdb/relay"
	"github.com/knowledgefs/kfsdb/worker"
)

// messagingAttributes are the attributes of a publish or process span.
func messagingAttributes(op attribute.KeyValue, opName, destination string) []attribute.KeyValue {
	return []attribute.KeyValue{
		semconv.MessagingSystemKey.String(MessagingSystem),
		semconv.MessagingDestinationName(destination),
		op,
		semconv.MessagingOperationName(opName),
	}
}

// failed marks span as failed with err.
func failed(span trace.Span, errorType string, err error) {
	span.SetAttributes(semconv.ErrorTypeKey.String(errorType))
	span.SetStatus(codes.Error, err.Error())
}

// Publisher is a relay.Publisher that traces each publication; see
// WrapPublisher. Safe for concurrent use when the wrapped one is.
type Publisher struct {
	next   relay.Publisher
	tracer trace.Tracer
}

var _ relay.Publisher = (*Publisher)(nil)

// WrapPublisher returns pub with a PRODUCER span "publish <event type>"
// ("publish document.compile") around each Publish, a child of the
// message's TraceContext (the Start's: give the relay
// Config.TraceContexts) or of ctx without one. pub receives a copy of the
// message whose TraceContext is the publish span's: its broker adapter
// carries it beside the payload (message headers), and memqueue does.
//
// Errors: ErrNilTracerProvider; pub is nil.
func WrapPublisher(pub relay.Publisher, tp trace.TracerProvider) (*Publisher, error) {
	if nilvalue.Is(pub) {
		return nil, errors.New("otel: WrapPublisher: publisher is nil")
	}
	if nilvalue.Is(tp) {
		return nil, ErrNilTracerProvider
	}
	return &Publisher{next: pub, tracer: tp.Tracer(ScopeName)}, nil
}

// Publish implements relay.Publisher.
func (p *Publisher) Publish(ctx context.Context, msg *relay.Message) (*relay.Publication, error) {
	switch {
	case p == nil || p.next == nil:
		return nil, errors.New("otel: the Publisher is nil or was not made by WrapPublisher")
	case nilvalue.Is(ctx):
		return nil, errors.New("otel: Publish: ctx is nil")
	case msg == nil:
		return nil, errors.New("otel: Publish: msg is nil")
	}
	parent := ctx
	if sc := spanContext(msg.TraceContext); sc.IsValid() {
		parent = trace.ContextWithRemoteSpanContext(ctx, sc)
	}
	attrs := append(messagingAttributes(semconv.MessagingOperationTypeSend, "publish", msg.EventType),
		semconv.MessagingMessageID(msg.ID.String()), AttemptIDKey.String(msg.AttemptID.String()))
	sctx, span := p.tracer.Start(parent, "publish "+msg.EventType, trace.WithSpanKind(trace.SpanKindProducer), trace.WithAttributes(attrs...))
	defer span.End()
	out := *msg
	out.TraceContext = TraceContext(sctx)
	pub, err := p.next.Publish(sctx, &out)
	if err != nil {
		failed(span, "_OTHER", err)
	}
	return pub, err
}

// WorkerTracer is a worker.Tracer; see NewWorkerTracer. Safe for
// concurrent use.
type WorkerTracer struct {
	tracer trace.Tracer
}

var _ worker.Tracer = (*WorkerTracer)(nil)

// NewWorkerTracer returns the worker.Tracer (worker.Config.Tracer) that
// puts a CONSUMER span "process document.compile" around each delivery's
// handling: the lease, the handler (whose ctx carries the span), the
// outcome's write and the acknowledgement. The span is a child of the
// trace context the message carries (worker.TracedMessage: the publish
// span's through the relay, the Start's with direct delivery and
// pgsource's Config.TraceContexts) and links to it; a message without one
// starts a trace of its own. It carries kfsdb.attempt_id, kfsdb.tenant_id
// once leased, kfsdb.outcome, and an error status when the handler failed
// or the outcome could not be recorded.
//
// Errors: ErrNilTracerProvider.
func NewWorkerTracer(tp trace.TracerProvider) (*WorkerTracer, error) {
	if nilvalue.Is(tp) {
		return nil, ErrNilTracerProvider
	}
	return &WorkerTracer{tracer: tp.Tracer(ScopeName)}, nil
}

// StartProcess implements worker.Tracer.
func (t *WorkerTracer) StartProcess(ctx context.Context, msg worker.Message) (context.Context, func(worker.Result)) {
	if t == nil || t.tracer == nil || nilvalue.Is(ctx) || nilvalue.Is(msg) {
		return ctx, nil
	}
	d := msg.Delivery()
	opts := []trace.SpanStartOption{
		trace.WithSpanKind(trace.SpanKindConsumer),
		trace.WithAttributes(append(messagingAttributes(semconv.MessagingOperationTypeProcess, "process", kfstype.EventTypeDocumentCompile),
			semconv.MessagingMessageID(d.QueueJobID), AttemptIDKey.String(d.AttemptID.String()))...),
	}
	parent := ctx
	if tm, ok := msg.(worker.TracedMessage); ok {
		if sc := spanContext(tm.TraceContext()); sc.IsValid() {
			// A child, so the attempt is one trace; and a link, as the
			// messaging conventions ask of a consumer.
			parent = trace.ContextWithRemoteSpanContext(ctx, sc)
			opts = append(opts, trace.WithLinks(trace.Link{SpanContext: sc}))
		}
	}
	sctx, span := t.tracer.Start(parent, "process "+kfstype.EventTypeDocumentCompile, opts...)
	return sctx, func(res worker.Result) {
		if res.TenantID != "" {
			span.SetAttributes(TenantIDKey.String(res.TenantID))
		}
		span.SetAttributes(OutcomeKey.String(string(res.Outcome)))
		switch res.Outcome {
		case worker.OutcomeFailed, worker.OutcomeRetried, worker.OutcomeExhausted, worker.OutcomeLeaseLost:
			err := res.Err
			if err == nil {
				err = errors.New(string(res.Outcome))
			}
			errorType := string(res.Outcome)
			var we *worker.Error
			if errors.As(err, &we) && we != nil && we.Code != "" {
				errorType = we.Code
			}
			failed(span, errorType, err)
		}
		span.End()
	}
}
