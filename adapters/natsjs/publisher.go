package natsjs

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/knowledgefs/kfsdb/relay"
)

// Headers of a published message besides Nats-Msg-Id. Consumers other
// than kfsdb's workers can route on them without decoding the payload.
const (
	HeaderAttemptID     = "Kfs-Attempt-Id"
	HeaderEventType     = "Kfs-Event-Type"
	HeaderOutboxID      = "Kfs-Outbox-Id"
	HeaderSchemaVersion = "Kfs-Schema-Version"
	// The W3C trace context (relay.Message.TraceContext), under the
	// header names of W3C's trace-context spec, when the message has one.
	HeaderTraceParent = "traceparent"
	HeaderTraceState  = "tracestate"
)

// Publisher timing: each try waits at most tryTimeout for the stream's
// acknowledgement, and tries are retried after retryBase, doubling up to
// retryCap, until the caller's context ends (the relay's PublishTimeout).
// An election of a new stream leader takes a few seconds; these ride it
// out within one Publish instead of costing the row a dispatch attempt.
const (
	tryTimeout = 2 * time.Second
	retryBase  = 50 * time.Millisecond
	retryCap   = time.Second
)

// Publisher is a relay.Publisher on a JetStream stream. Create it with
// NewPublisher. Safe for concurrent use.
type Publisher struct {
	js  jetstream.JetStream
	cfg *Config
}

// NewPublisher returns a publisher to cfg's stream (cfg may be nil: the
// defaults). It does not create the stream: see EnsureStream.
func NewPublisher(js jetstream.JetStream, cfg *Config) (*Publisher, error) {
	c, err := prepare(context.Background(), js, cfg)
	if err != nil {
		return nil, err
	}
	return &Publisher{js: js, cfg: c}, nil
}

// Publish implements relay.Publisher. It publishes msg's payload with
// Nats-Msg-Id set to MsgID(msg) and returns the stream's sequence as the
// queue job id ("<stream>:<sequence>"). A repeat the stream deduplicated
// returns the sequence of the message it stored first. Errors a new
// stream leader or a reconnect cures (no responders, timeouts, 503) are
// retried until ctx ends, then returned wrapped in ErrUnavailable.
func (p *Publisher) Publish(ctx context.Context, msg *relay.Message) (*relay.Publication, error) {
	switch {
	case p == nil || p.js == nil:
		return nil, fmt.Errorf("%w: nil Publisher (use natsjs.NewPublisher)", ErrInvalidInput)
	case ctx == nil:
		return nil, fmt.Errorf("%w: ctx is nil", ErrInvalidInput)
	case msg == nil:
		return nil, fmt.Errorf("%w: msg is nil", ErrInvalidInput)
	case msg.IdempotencyKey == "":
		return nil, fmt.Errorf("%w: msg %s has no idempotency key", ErrInvalidInput, msg.ID)
	}
	id := MsgID(msg)
	var lastErr error
	for wait := retryBase; ; wait = min(2*wait, retryCap) {
		ack, err := p.try(ctx, msg, id)
		if err == nil {
			return &relay.Publication{QueueJobID: JobID(ack.Stream, ack.Sequence)}, nil
		}
		if !transient(err) {
			return nil, fmt.Errorf("natsjs: publish outbox row %s to %q: %w", msg.ID, p.cfg.Subject(), err)
		}
		lastErr = err
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, fmt.Errorf("%w: publish outbox row %s to %q: %w", ErrUnavailable, msg.ID, p.cfg.Subject(), errors.Join(lastErr, ctx.Err()))
		case <-t.C:
		}
	}
}

// try publishes once; a new message each time, since PublishMsg adds the
// headers to it.
func (p *Publisher) try(ctx context.Context, msg *relay.Message, id string) (*jetstream.PubAck, error) {
	tctx, cancel := context.WithTimeout(ctx, tryTimeout)
	defer cancel()
	m := nats.NewMsg(p.cfg.Subject())
	m.Data = msg.Payload
	m.Header.Set(HeaderAttemptID, msg.AttemptID.String())
	m.Header.Set(HeaderEventType, msg.EventType)
	m.Header.Set(HeaderOutboxID, msg.ID.String())
	m.Header.Set(HeaderSchemaVersion, strconv.Itoa(int(msg.SchemaVersion)))
	if tc := msg.TraceContext; !tc.IsZero() {
		m.Header.Set(HeaderTraceParent, tc.TraceParent)
		if tc.TraceState != "" {
			m.Header.Set(HeaderTraceState, tc.TraceState)
		}
	}
	// No retries inside nats.go: this loop retries, with a deadline per try.
	return p.js.PublishMsg(tctx, m, jetstream.WithMsgID(id), jetstream.WithExpectStream(p.cfg.Stream), jetstream.WithRetryAttempts(0))
}

// MsgID is the Nats-Msg-Id a message is published with: its idempotency
// key and, when set, its claim's lock token. The stream then drops a
// repeat of one publication (a retry after a lost acknowledgement) but
// stores the row's later publications (after a retry, a visibility
// timeout or a lost lease), which share the idempotency key.
func MsgID(msg *relay.Message) string {
	if msg.LockToken == uuid.Nil {
		return msg.IdempotencyKey
	}
	return msg.IdempotencyKey + ":" + msg.LockToken.String()
}

// JobID is the queue job id of the message at seq in stream.
func JobID(stream string, seq uint64) string {
	return stream + ":" + strconv.FormatUint(seq, 10)
}

// errCodeDuplicateInProcess is JetStream's "duplicate message id is in
// process" (409, nats-server's JSStreamDuplicateMessageConflict; nats.go
// names no constant for it): a retry whose Nats-Msg-Id the stream is still
// storing from an earlier try that timed out, as after a leader change.
// The next try gets the deduplicated acknowledgement.
const errCodeDuplicateInProcess jetstream.ErrorCode = 10158

// transient reports whether err is one a retry may cure: nobody answered
// (no stream leader yet, a server restarting), no answer in time (a lost
// acknowledgement, a reconnect), JetStream said it is unavailable, or the
// same message id is still being stored from an earlier try.
func transient(err error) bool {
	var apiErr *jetstream.APIError
	switch {
	case errors.Is(err, nats.ErrNoResponders), errors.Is(err, jetstream.ErrNoStreamResponse),
		errors.Is(err, nats.ErrTimeout), errors.Is(err, context.DeadlineExceeded),
		errors.Is(err, nats.ErrConnectionReconnecting), errors.Is(err, nats.ErrDisconnected):
		return true
	case errors.As(err, &apiErr):
		return apiErr.Code == 503 || apiErr.Code == 408 || apiErr.ErrorCode == errCodeDuplicateInProcess
	}
	return false
}
