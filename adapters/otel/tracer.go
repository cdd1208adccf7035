package otel

import (
	"context"
	"errors"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/knowledgefs/kfsdb/internal/nilvalue"
	"github.com/knowledgefs/kfsdb/observe"
)

// TracerOptions tunes NewTracer.
type TracerOptions struct {
	// RootStatements traces statements run outside any span too. Defaults
	// to false: only statements inside a trace get a span, so that the
	// relay's and the sources' polling (every second while idle, each
	// statement its own trace) does not flood the backend.
	RootStatements bool
}

// Tracer is a pgx.QueryTracer and pgx.BatchTracer that gives each
// statement a CLIENT span named after its sqlc query ("-- name:
// StartAttempt :one" gives StartAttempt; SQL without that header is named
// "postgresql"), with db.system.name, db.operation.name and
// db.query.summary (both the sqlc name), db.namespace, server.address and
// server.port, and on failure an error status with error.type and
// db.response.status_code (the SQLSTATE). pgx.ErrNoRows (a refused guard)
// is not a failure. Neither the SQL text nor its arguments are recorded.
// A batch is a "BATCH" span with one child span per statement. Set it as
// pgxpool.Config.ConnConfig.Tracer (pgx's multitracer combines it with
// adapters/prom's). Safe for concurrent use.
type Tracer struct {
	tracer trace.Tracer
	root   bool
}

var (
	_ pgx.QueryTracer = (*Tracer)(nil)
	_ pgx.BatchTracer = (*Tracer)(nil)
)

// NewTracer returns a Tracer whose spans go to tp. opts may be nil.
//
// Errors: ErrNilTracerProvider.
func NewTracer(tp trace.TracerProvider, opts *TracerOptions) (*Tracer, error) {
	if nilvalue.Is(tp) {
		return nil, ErrNilTracerProvider
	}
	if opts == nil {
		opts = &TracerOptions{}
	}
	return &Tracer{tracer: tp.Tracer(ScopeName), root: opts.RootStatements}, nil
}

// traced reports whether a statement under ctx gets a span.
func (t *Tracer) traced(ctx context.Context) bool {
	return t != nil && t.tracer != nil && (t.root || trace.SpanContextFromContext(ctx).IsValid())
}

// start opens a statement's span named after sql's sqlc query.
func (t *Tracer) start(ctx context.Context, conn *pgx.Conn, sql string, at time.Time) (context.Context, trace.Span) {
	attrs := connAttributes(conn)
	name := observe.QueryName(sql)
	if name == observe.OtherQuery {
		name = semconv.DBSystemNamePostgreSQL.Value.AsString()
	} else {
		attrs = append(attrs, semconv.DBOperationName(name), semconv.DBQuerySummary(name))
	}
	return t.tracer.Start(ctx, name, trace.WithSpanKind(trace.SpanKindClient), trace.WithAttributes(attrs...), trace.WithTimestamp(at))
}

// connAttributes are the attributes every statement on conn carries.
func connAttributes(conn *pgx.Conn) []attribute.KeyValue {
	attrs := []attribute.KeyValue{semconv.DBSystemNamePostgreSQL}
	if conn == nil || conn.Config() == nil {
		return attrs
	}
	cfg := conn.Config()
	if cfg.Database != "" {
		attrs = append(attrs, semconv.DBNamespace(cfg.Database))
	}
	if cfg.Host != "" {
		attrs = append(attrs, semconv.ServerAddress(cfg.Host))
	}
	if cfg.Port != 0 {
		attrs = append(attrs, semconv.ServerPort(int(cfg.Port)))
	}
	return attrs
}

// end closes a statement's span, marking a failure (not ErrNoRows).
func end(span trace.Span, err error) {
	if err != nil && !errors.Is(err, pgx.ErrNoRows) {
		errorType := "_OTHER"
		var pgErr *pgconn.PgError
		if errors.As(err, &pgErr) {
			errorType = pgErr.Code
			span.SetAttributes(semconv.DBResponseStatusCode(pgErr.Code))
		} else if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
			errorType = "timeout"
		}
		span.SetAttributes(semconv.ErrorTypeKey.String(errorType))
		span.SetStatus(codes.Error, err.Error())
	}
	span.End()
}

type querySpanKey struct{}

// TraceQueryStart implements pgx.QueryTracer.
func (t *Tracer) TraceQueryStart(ctx context.Context, conn *pgx.Conn, data pgx.TraceQueryStartData) context.Context {
	if !t.traced(ctx) {
		return ctx
	}
	ctx, span := t.start(ctx, conn, data.SQL, time.Now())
	return context.WithValue(ctx, querySpanKey{}, span)
}

// TraceQueryEnd implements pgx.QueryTracer.
func (t *Tracer) TraceQueryEnd(ctx context.Context, _ *pgx.Conn, data pgx.TraceQueryEndData) {
	if span, ok := ctx.Value(querySpanKey{}).(trace.Span); ok {
		end(span, data.Err)
	}
}

type batchKey struct{}

// batchState is a traced batch: its span, and when its previous statement
// ended (pgx reports each statement only once its result is read, so a
// statement's span runs from the previous one's end to its own).
type batchState struct {
	span trace.Span
	ctx  context.Context
	conn *pgx.Conn
	last time.Time
}

// TraceBatchStart implements pgx.BatchTracer.
func (t *Tracer) TraceBatchStart(ctx context.Context, conn *pgx.Conn, data pgx.TraceBatchStartData) context.Context {
	if !t.traced(ctx) {
		return ctx
	}
	attrs := append(connAttributes(conn), semconv.DBOperationName("BATCH"))
	if data.Batch != nil {
		attrs = append(attrs, attribute.Int("db.operation.batch.size", data.Batch.Len()))
	}
	now := time.Now()
	sctx, span := t.tracer.Start(ctx, "BATCH", trace.WithSpanKind(trace.SpanKindClient), trace.WithAttributes(attrs...), trace.WithTimestamp(now))
	return context.WithValue(sctx, batchKey{}, &batchState{span: span, ctx: sctx, conn: conn, last: now})
}

// TraceBatchQuery implements pgx.BatchTracer.
func (t *Tracer) TraceBatchQuery(ctx context.Context, _ *pgx.Conn, data pgx.TraceBatchQueryData) {
	b, ok := ctx.Value(batchKey{}).(*batchState)
	if !ok {
		return
	}
	_, span := t.start(b.ctx, b.conn, data.SQL, b.last)
	b.last = time.Now()
	end(spanAt{span, b.last}, data.Err)
}

// TraceBatchEnd implements pgx.BatchTracer.
func (t *Tracer) TraceBatchEnd(ctx context.Context, _ *pgx.Conn, data pgx.TraceBatchEndData) {
	if b, ok := ctx.Value(batchKey{}).(*batchState); ok {
		end(b.span, data.Err)
	}
}

// spanAt ends its span at a given time.
type spanAt struct {
	trace.Span
	at time.Time
}

func (s spanAt) End(opts ...trace.SpanEndOption) {
	s.Span.End(append(opts, trace.WithTimestamp(s.at))...)
}
