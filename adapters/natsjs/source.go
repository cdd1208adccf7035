package natsjs

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/knowledgefs/kfsdb/kfstype"
	"github.com/knowledgefs/kfsdb/repo"
	"github.com/knowledgefs/kfsdb/worker"
)

// Source is a worker.Source on the durable pull consumer of cfg's stream.
// Create it with NewSource. Safe for concurrent use: the worker's slots
// call Receive together, and one pull request at a time asks for as many
// messages as slots wait (up to MaxFetch), so no message waits in a
// buffer while its ack wait runs.
//
// Its messages implement worker.Extender and worker.Discarder: Ack is a
// double ack (it returns once the server has it, and the worker calls it
// only after the outcome's database write), Retry is a delayed nak,
// Extend (at each heartbeat) is "in progress", and a stale delivery is
// terminated.
type Source struct {
	cons jetstream.Consumer
	cfg  *Config
	// waiting counts the goroutines in Receive.
	waiting atomic.Int64
	// turn is held by the one Receive that runs a pull request.
	turn chan struct{}
	// ready holds what the pull request brought for the waiting slots.
	ready chan jetstream.Msg
}

// NewSource returns a source on cfg's consumer (cfg may be nil: the
// defaults), which must exist: see EnsureStream.
func NewSource(ctx context.Context, js jetstream.JetStream, cfg *Config) (*Source, error) {
	c, err := prepare(ctx, js, cfg)
	if err != nil {
		return nil, err
	}
	cons, err := js.Consumer(ctx, c.Stream, c.Consumer)
	if err != nil {
		return nil, fmt.Errorf("natsjs: look up consumer %q of stream %q (EnsureStream creates it): %w", c.Consumer, c.Stream, err)
	}
	return &Source{cons: cons, cfg: c, turn: make(chan struct{}, 1), ready: make(chan jetstream.Msg, c.MaxFetch)}, nil
}

// Receive implements worker.Source.
func (s *Source) Receive(ctx context.Context) (worker.Message, error) {
	switch {
	case s == nil || s.cons == nil:
		return nil, fmt.Errorf("%w: nil Source (use natsjs.NewSource)", ErrInvalidInput)
	case ctx == nil:
		return nil, fmt.Errorf("%w: ctx is nil", ErrInvalidInput)
	}
	s.waiting.Add(1)
	defer s.waiting.Add(-1)
	for {
		select {
		case m := <-s.ready:
			return newMessage(m), nil
		case <-ctx.Done():
			return nil, ctx.Err()
		case s.turn <- struct{}{}:
		}
		err := s.fetch(ctx)
		<-s.turn
		if err != nil {
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			return nil, fmt.Errorf("natsjs: fetch from consumer %q of stream %q: %w", s.cfg.Consumer, s.cfg.Stream, err)
		}
	}
}

// fetch runs one pull request for the slots waiting without a message,
// and hands each message to them as it arrives.
func (s *Source) fetch(ctx context.Context) error {
	n := min(int(s.waiting.Load()), cap(s.ready)) - len(s.ready)
	if n <= 0 {
		return nil
	}
	fctx, cancel := context.WithTimeout(ctx, s.cfg.FetchMaxWait)
	defer cancel()
	batch, err := s.cons.Fetch(n, jetstream.FetchContext(fctx))
	if err != nil {
		return err
	}
	for m := range batch.Messages() {
		s.ready <- m // never blocks: only this pull fills ready, for n ≤ its free room
	}
	if ctx.Err() != nil {
		// The slots are stopping: hand back what they will not take,
		// instead of leaving it to the ack wait.
		for {
			select {
			case m := <-s.ready:
				_ = m.Nak()
			default:
				return ctx.Err()
			}
		}
	}
	if err := batch.Error(); err != nil && !errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	return nil
}

// message is one delivery of the stream.
type message struct {
	m jetstream.Msg
	d repo.Delivery
}

var (
	_ worker.Extender      = (*message)(nil)
	_ worker.Discarder     = (*message)(nil)
	_ worker.TracedMessage = (*message)(nil)
)

// newMessage reads the delivery from m. A message without a valid payload
// or metadata gets a zero attempt id, which the worker refuses as
// malformed and discards.
func newMessage(m jetstream.Msg) *message {
	var d repo.Delivery
	if md, err := m.Metadata(); err == nil {
		d.QueueJobID = JobID(md.Stream, md.Sequence.Stream)
	}
	if p, err := repo.DecodePayload(m.Data()); err == nil {
		d.AttemptID = p.AttemptID
	}
	return &message{m: m, d: d}
}

// Delivery implements worker.Message.
func (m *message) Delivery() repo.Delivery { return m.d }

// Ack implements worker.Message: it waits until the server confirms, so a
// nil error means the message will not come again.
func (m *message) Ack(ctx context.Context) error { return m.m.DoubleAck(ctx) }

// Retry implements worker.Message: the broker delivers the message again
// once notBefore has passed. Each retry counts toward MaxDeliver.
func (m *message) Retry(_ context.Context, notBefore time.Time) error {
	return m.m.NakWithDelay(max(time.Until(notBefore), 0))
}

// TraceContext implements worker.TracedMessage: the trace context the
// publisher put in the headers (zero when there is none).
func (m *message) TraceContext() kfstype.TraceContext {
	h := m.m.Headers()
	if h == nil {
		return kfstype.TraceContext{}
	}
	return kfstype.TraceContext{TraceParent: h.Get(HeaderTraceParent), TraceState: h.Get(HeaderTraceState)}
}

// Extend implements worker.Extender: the ack wait starts again.
func (m *message) Extend(context.Context) error { return m.m.InProgress() }

// Discard implements worker.Discarder: the broker never delivers the
// message again, and emits a terminated-message advisory.
func (m *message) Discard(context.Context) error {
	return m.m.TermWithReason("stale delivery: refused by the kfsdb worker")
}
