package natsjs

import "errors"

// ErrInvalidConfig is returned by EnsureStream, NewPublisher and
// NewSource for a Config field out of range, for example an empty-looking
// Stream " " or Replicas 7; the message names the field.
var ErrInvalidConfig = errors.New("natsjs: invalid config")

// ErrInvalidInput is returned for a nil argument or receiver: a nil
// JetStream to EnsureStream, NewPublisher or NewSource, a nil context, a
// nil message or one without an idempotency key to Publisher.Publish, a
// nil Publisher or Source.
var ErrInvalidInput = errors.New("natsjs: invalid input")

// ErrUnavailable is returned by Publisher.Publish when the stream did not
// acknowledge the message before the context ended (no server, no stream
// leader during an election, a lost acknowledgement); the last error from
// NATS is joined to it. The relay backs off and publishes again.
var ErrUnavailable = errors.New("natsjs: stream unavailable")
