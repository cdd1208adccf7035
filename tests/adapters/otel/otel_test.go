// Package otel_test runs the OpenTelemetry adapter (adapters/otel) on real
// databases from the harness: the spans of direct delivery, of the relay
// and of a failing handler, untraced and malformed trace contexts, and its
// constructors. It is in the tests module so that adapters/otel, which is
// released, never requires it.
package otel_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	kotel "github.com/knowledgefs/kfsdb/adapters/otel"
	"github.com/knowledgefs/kfsdb/kfstype"
	"github.com/knowledgefs/kfsdb/memqueue"
	"github.com/knowledgefs/kfsdb/pgsource"
	"github.com/knowledgefs/kfsdb/relay"
	"github.com/knowledgefs/kfsdb/repo"
	"github.com/knowledgefs/kfsdb/tests/pgtest"
	"github.com/knowledgefs/kfsdb/tests/testfactory"
	"github.com/knowledgefs/kfsdb/worker"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

var discardLog = slog.New(slog.NewTextHandler(io.Discard, nil))

type testBundle struct {
	exp  *tracetest.InMemoryExporter
	tp   *sdktrace.TracerProvider
	pool *pgxpool.Pool
	r    *repo.Repo
	// leaseTokens are every lease a handler ran under: no attribute may
	// hold one.
	mu          sync.Mutex
	leaseTokens []string
}

func setup(t *testing.T) *testBundle {
	t.Helper()
	exp := tracetest.NewInMemoryExporter()
	// A syncer exports each span as it ends, so the test reads them all.
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	tr, err := kotel.NewTracer(tp, nil)
	require.NoError(t, err)
	db := pgtest.NewDB(t)
	cfg, err := pgxpool.ParseConfig(db.URL)
	require.NoError(t, err)
	cfg.MaxConns = 12
	cfg.ConnConfig.Tracer = tr
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	return &testBundle{exp: exp, tp: tp, pool: pool, r: repo.New(nil)}
}

// started is an attempt started inside a caller's span ("request").
type started struct {
	attempt *kfstype.Attempt
	request trace.SpanContext
}

// start starts one attempt per document, each inside a span of its own as
// an application request would, passing that span's trace context.
func (b *testBundle) start(ctx context.Context, t *testing.T, docs []testfactory.Document, traced bool) []started {
	t.Helper()
	out := make([]started, len(docs))
	for i, d := range docs {
		rctx, span := b.tp.Tracer("app").Start(ctx, "request")
		p := d.Scope.StartParams()
		if traced {
			p.TraceContext = kotel.TraceContext(rctx)
			require.False(t, p.TraceContext.IsZero())
		}
		res, err := b.r.Start(rctx, b.pool, p)
		require.NoError(t, err)
		require.True(t, res.Created)
		span.End()
		out[i] = started{attempt: res.Attempt, request: span.SpanContext()}
	}
	return out
}

// handler compiles each attempt, noting its lease token.
func (b *testBundle) handler(docs []testfactory.Document) worker.Handler {
	cands := testfactory.Candidates(docs)
	return worker.HandlerFunc(func(ctx context.Context, job *worker.Job) error {
		b.mu.Lock()
		b.leaseTokens = append(b.leaseTokens, job.Lease().Token.String())
		b.mu.Unlock()
		return testfactory.CompileJob(ctx, job, cands[job.Attempt.KnowledgeSpaceID], nil)
	})
}

func (b *testBundle) waitEnded(ctx context.Context, t *testing.T) {
	t.Helper()
	require.Eventually(t, func() bool {
		var n int
		require.NoError(t, b.pool.QueryRow(ctx, `SELECT count(*) FROM document_compilation_attempts WHERE completed_at IS NULL`).Scan(&n))
		return n == 0
	}, 60*time.Second, 10*time.Millisecond)
}

// runDirect runs h on a worker with the worker tracer, fed by pgsource
// carrying trace contexts, until every attempt has ended.
func (b *testBundle) runDirect(ctx context.Context, t *testing.T, h worker.Handler, concurrency int) {
	t.Helper()
	wt, err := kotel.NewWorkerTracer(b.tp)
	require.NoError(t, err)
	src, err := pgsource.New(b.pool, &pgsource.Config{Logger: discardLog, TraceContexts: true})
	require.NoError(t, err)
	w, err := worker.New(b.pool, src, h, &worker.Config{Concurrency: concurrency, Logger: discardLog, Tracer: wt})
	require.NoError(t, err)
	stop := testfactory.RunAll(ctx, t, w.Run)
	b.waitEnded(ctx, t)
	stop()
}

func attr(s tracetest.SpanStub, k attribute.Key) (attribute.Value, bool) {
	for _, a := range s.Attributes {
		if a.Key == k {
			return a.Value, true
		}
	}
	return attribute.Value{}, false
}

func requireAttr(t *testing.T, s tracetest.SpanStub, k attribute.Key, want string) {
	t.Helper()
	v, ok := attr(s, k)
	require.True(t, ok, "span %s has no %s", s.Name, k)
	require.Equal(t, want, v.String(), "span %s attribute %s", s.Name, k)
}

// byTrace groups the exported spans by trace id.
func byTrace(spans tracetest.SpanStubs) map[trace.TraceID][]tracetest.SpanStub {
	out := map[trace.TraceID][]tracetest.SpanStub{}
	for _, s := range spans {
		out[s.SpanContext.TraceID()] = append(out[s.SpanContext.TraceID()], s)
	}
	return out
}

// only returns the single span of the trace named name.
func only(t *testing.T, spans []tracetest.SpanStub, name string) tracetest.SpanStub {
	t.Helper()
	var found []tracetest.SpanStub
	for _, s := range spans {
		if s.Name == name {
			found = append(found, s)
		}
	}
	require.Len(t, found, 1, "spans named %q in the trace", name)
	return found[0]
}

func names(spans []tracetest.SpanStub) map[string]int {
	out := map[string]int{}
	for _, s := range spans {
		out[s.Name]++
	}
	return out
}

// checkStartAttempt checks the Start statement's span of an attempt's trace:
// a CLIENT span under the request with the database conventions.
func checkStartAttempt(t *testing.T, spans []tracetest.SpanStub, st started) {
	t.Helper()
	s := only(t, spans, "Start")
	require.Equal(t, trace.SpanKindClient, s.SpanKind)
	require.Equal(t, st.request.SpanID(), s.Parent.SpanID())
	requireAttr(t, s, "db.system.name", "postgresql")
	requireAttr(t, s, "db.operation.name", "Start")
	requireAttr(t, s, "db.query.summary", "Start")
	_, ok := attr(s, "server.address")
	require.True(t, ok)
	_, ok = attr(s, "server.port")
	require.True(t, ok)
	require.Equal(t, codes.Unset, s.Status.Code)
}

// checkProcess checks the consumer span of an attempt's trace: a child of
// parent, linked to it, with the messaging and kfsdb attributes.
func checkProcess(t *testing.T, spans []tracetest.SpanStub, st started, parent trace.SpanContext, outcome worker.Outcome) tracetest.SpanStub {
	t.Helper()
	s := only(t, spans, "process document.compile")
	require.Equal(t, trace.SpanKindConsumer, s.SpanKind)
	require.Equal(t, parent.SpanID(), s.Parent.SpanID(), "process span's parent")
	require.Len(t, s.Links, 1)
	require.Equal(t, parent.TraceID(), s.Links[0].SpanContext.TraceID())
	require.Equal(t, parent.SpanID(), s.Links[0].SpanContext.SpanID())
	requireAttr(t, s, "messaging.system", kotel.MessagingSystem)
	requireAttr(t, s, "messaging.destination.name", "document.compile")
	requireAttr(t, s, "messaging.operation.type", "process")
	requireAttr(t, s, kotel.AttemptIDKey, st.attempt.ID.String())
	requireAttr(t, s, kotel.TenantIDKey, st.attempt.TenantID)
	requireAttr(t, s, kotel.OutcomeKey, string(outcome))
	return s
}

// checkNoSecrets fails if any attribute holds a payload or a lease token.
func (b *testBundle) checkNoSecrets(t *testing.T, spans tracetest.SpanStubs) {
	t.Helper()
	b.mu.Lock()
	defer b.mu.Unlock()
	require.NotEmpty(t, b.leaseTokens)
	for _, s := range spans {
		for _, a := range s.Attributes {
			v := a.Value.String()
			require.NotContains(t, v, "attemptId", "span %s attribute %s", s.Name, a.Key)
			for _, tok := range b.leaseTokens {
				require.NotContains(t, v, tok, "span %s attribute %s holds a lease token", s.Name, a.Key)
			}
		}
	}
}

// TestDirectDeliveryTrace: Start inside a request span, a worker on
// pgsource (TraceContexts) with the worker tracer: each attempt is one
// trace holding the request, its Start span and the process span
// (a child of the request, linked to it) with the handler's statements
// under it.
func TestDirectDeliveryTrace(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	docs := testfactory.SeedDocuments(ctx, t, b.pool, 2, 3)
	sts := b.start(ctx, t, docs, true)

	b.runDirect(ctx, t, b.handler(docs), 3)

	spans := b.exp.GetSpans()
	traces := byTrace(spans)
	for _, st := range sts {
		require.Equal(t, kfstype.RunStateSucceeded, b.runState(ctx, t, st.attempt.ID))
		tr := traces[st.request.TraceID()]
		checkStartAttempt(t, tr, st)
		p := checkProcess(t, tr, st, st.request, worker.OutcomeCompleted)
		// The handler's checkpoints run under the process span.
		n := names(tr)
		require.Equal(t, 5, n["Advance"], "Advance spans in %v", n)
		for _, s := range tr {
			if s.Name == "Advance" {
				require.Equal(t, p.SpanContext.SpanID(), s.Parent.SpanID())
			}
		}
		require.Zero(t, n["publish document.compile"])
	}
	require.Len(t, distinctTraces(sts), len(sts), "one trace per attempt")
	b.checkNoSecrets(t, spans)
}

func distinctTraces(sts []started) map[trace.TraceID]bool {
	out := map[trace.TraceID]bool{}
	for _, st := range sts {
		out[st.request.TraceID()] = true
	}
	return out
}

func (b *testBundle) runState(ctx context.Context, t *testing.T, id uuid.UUID) kfstype.RunState {
	t.Helper()
	var s string
	require.NoError(t, b.pool.QueryRow(ctx, `SELECT run_state FROM document_compilation_attempts WHERE id = $1`, id).Scan(&s))
	return kfstype.RunState(s)
}

// TestRelayTrace: the relay (TraceContexts) publishes through the wrapped
// memqueue: the publish span (PRODUCER) is a child of the request, the
// process span a child of the publish span and linked to it, and, with
// single completions, Complete runs under the process span: one trace
// from Start through completion.
func TestRelayTrace(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	docs := testfactory.SeedDocuments(ctx, t, b.pool, 2, 2)
	sts := b.start(ctx, t, docs, true)

	q := memqueue.New()
	pub, err := kotel.WrapPublisher(q, b.tp)
	require.NoError(t, err)
	rl, err := relay.New(b.pool, pub, &relay.Config{Logger: discardLog, TraceContexts: true})
	require.NoError(t, err)
	wt, err := kotel.NewWorkerTracer(b.tp)
	require.NoError(t, err)
	w, err := worker.New(b.pool, q, b.handler(docs), &worker.Config{Concurrency: 2, Logger: discardLog, Tracer: wt, SingleCompletions: true})
	require.NoError(t, err)
	stop := testfactory.RunAll(ctx, t, rl.Run, w.Run)
	b.waitEnded(ctx, t)
	stop()

	spans := b.exp.GetSpans()
	traces := byTrace(spans)
	for _, st := range sts {
		require.Equal(t, kfstype.RunStateSucceeded, b.runState(ctx, t, st.attempt.ID))
		tr := traces[st.request.TraceID()]
		checkStartAttempt(t, tr, st)
		// A publication may repeat (at least once); every one is in the
		// trace, and the delivery that ran is a child of one of them.
		var pubs []tracetest.SpanStub
		for _, s := range tr {
			if s.Name == "publish document.compile" {
				pubs = append(pubs, s)
			}
		}
		require.NotEmpty(t, pubs)
		for _, s := range pubs {
			require.Equal(t, trace.SpanKindProducer, s.SpanKind)
			require.Equal(t, st.request.SpanID(), s.Parent.SpanID())
			requireAttr(t, s, "messaging.operation.type", "send")
			requireAttr(t, s, "messaging.destination.name", "document.compile")
			requireAttr(t, s, kotel.AttemptIDKey, st.attempt.ID.String())
		}
		var processes []tracetest.SpanStub
		for _, s := range tr {
			if s.Name == "process document.compile" {
				processes = append(processes, s)
			}
		}
		// The delivery that completed the attempt.
		var done tracetest.SpanStub
		for _, s := range processes {
			if v, _ := attr(s, kotel.OutcomeKey); v.AsString() == string(worker.OutcomeCompleted) {
				done = s
			}
		}
		var parent trace.SpanContext
		for _, s := range pubs {
			if s.SpanContext.SpanID() == done.Parent.SpanID() {
				parent = s.SpanContext
			}
		}
		require.True(t, parent.IsValid(), "the completed delivery's process span is a child of a publish span")
		checkProcess(t, []tracetest.SpanStub{done}, st, parent, worker.OutcomeCompleted)
		var complete int
		for _, s := range tr {
			if s.Name == "AcquireLease" || s.Name == "Complete" {
				if s.Parent.SpanID() == done.SpanContext.SpanID() {
					complete++
				}
			}
		}
		require.GreaterOrEqual(t, complete, 2, "AcquireLease and Complete under the process span: %v", names(tr))
	}
	require.Len(t, distinctTraces(sts), len(sts), "one trace per attempt")
	b.checkNoSecrets(t, spans)
}

// TestFailingHandlerSpan: a handler's fatal error gives the process span
// an error status with the error code as error.type.
func TestFailingHandlerSpan(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	docs := testfactory.SeedDocuments(ctx, t, b.pool, 1, 1)
	sts := b.start(ctx, t, docs, true)

	h := worker.HandlerFunc(func(context.Context, *worker.Job) error {
		return worker.Fatal("BAD_DOCUMENT", errors.New("unparseable"))
	})
	b.runDirect(ctx, t, h, 1)

	tr := byTrace(b.exp.GetSpans())[sts[0].request.TraceID()]
	p := checkProcess(t, tr, sts[0], sts[0].request, worker.OutcomeFailed)
	require.Equal(t, codes.Error, p.Status.Code)
	require.Contains(t, p.Status.Description, "unparseable")
	requireAttr(t, p, "error.type", "BAD_DOCUMENT")
}

// TestUntracedStart: a Start without a trace context stores none (the
// table stays empty) and its delivery's span starts a trace of its own.
func TestUntracedStart(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	docs := testfactory.SeedDocuments(ctx, t, b.pool, 1, 1)
	sts := b.start(ctx, t, docs, false)
	var n int
	require.NoError(t, b.pool.QueryRow(ctx, `SELECT count(*) FROM document_compilation_trace_contexts`).Scan(&n))
	require.Zero(t, n)

	b.runDirect(ctx, t, b.handler(docs), 1)

	var p tracetest.SpanStub
	for _, s := range b.exp.GetSpans() {
		if s.Name == "process document.compile" {
			p = s
		}
	}
	require.Equal(t, "process document.compile", p.Name)
	require.False(t, p.Parent.IsValid(), "no parent")
	require.Empty(t, p.Links)
	require.NotEqual(t, sts[0].request.TraceID(), p.SpanContext.TraceID())
}

// TestStartRejectsMalformedTraceContext: a malformed trace context is an
// *InputError naming the field, before any statement.
func TestStartRejectsMalformedTraceContext(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	docs := testfactory.SeedDocuments(ctx, t, b.pool, 1, 1)
	valid := "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
	for name, tc := range map[string]kfstype.TraceContext{
		"short":          {TraceParent: "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331"},
		"uppercase":      {TraceParent: strings.ToUpper(valid)},
		"version ff":     {TraceParent: "ff" + valid[2:]},
		"zero trace id":  {TraceParent: "00-00000000000000000000000000000000-b7ad6b7169203331-01"},
		"zero parent id": {TraceParent: "00-0af7651916cd43dd8448eb211c80319c-0000000000000000-01"},
		"state alone":    {TraceState: "a=b"},
		"state too long": {TraceParent: valid, TraceState: strings.Repeat("a", repo.MaxTraceStateLength+1)},
		"state control":  {TraceParent: valid, TraceState: "a=b\n"},
	} {
		p := docs[0].Scope.StartParams()
		p.TraceContext = tc
		_, err := b.r.Start(ctx, b.pool, p)
		var ie *repo.InputError
		require.ErrorAs(t, err, &ie, name)
		require.True(t, strings.HasPrefix(ie.Field, "TraceContext."), "%s: %s", name, ie.Field)
	}
	require.Equal(t, kfstype.TraceContext{}, kotel.TraceContext(ctx), "no span, no trace context")
}

// TestConstructorsRefuseNil: nil arguments are errors, never panics.
func TestConstructorsRefuseNil(t *testing.T) {
	t.Parallel()
	_, err := kotel.NewTracer(nil, nil)
	require.ErrorIs(t, err, kotel.ErrNilTracerProvider)
	_, err = kotel.NewWorkerTracer(nil)
	require.ErrorIs(t, err, kotel.ErrNilTracerProvider)
	_, err = kotel.WrapPublisher(memqueue.New(), nil)
	require.ErrorIs(t, err, kotel.ErrNilTracerProvider)
	_, err = kotel.WrapPublisher(nil, sdktrace.NewTracerProvider())
	require.Error(t, err)
	var p *kotel.Publisher
	_, err = p.Publish(context.Background(), &relay.Message{})
	require.Error(t, err)
	pub, err := kotel.WrapPublisher(memqueue.New(), sdktrace.NewTracerProvider())
	require.NoError(t, err)
	_, err = pub.Publish(context.Background(), nil)
	require.Error(t, err)
	var wt *kotel.WorkerTracer
	ctx, end := wt.StartProcess(context.Background(), nil)
	require.NotNil(t, ctx)
	require.Nil(t, end)
	var nilCtx context.Context
	require.Equal(t, kfstype.TraceContext{}, kotel.TraceContext(nilCtx))
}
