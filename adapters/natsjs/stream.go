package natsjs

import (
	"context"
	"fmt"

	"github.com/nats-io/nats.go/jetstream"
)

// EnsureStream creates the stream and the workers' durable consumer that
// cfg describes, or updates them to it. cfg may be nil (the defaults).
// Run it before the relay publishes: the stream keeps a message only while
// a consumer is interested in it (interest retention, so that other
// consumers may read the same subject; each settles on its own).
func EnsureStream(ctx context.Context, js jetstream.JetStream, cfg *Config) error {
	c, err := prepare(ctx, js, cfg)
	if err != nil {
		return err
	}
	if _, err := js.CreateOrUpdateStream(ctx, c.streamConfig()); err != nil {
		return fmt.Errorf("natsjs: create or update stream %q: %w", c.Stream, err)
	}
	if _, err := js.CreateOrUpdateConsumer(ctx, c.Stream, c.consumerConfig()); err != nil {
		return fmt.Errorf("natsjs: create or update consumer %q of stream %q: %w", c.Consumer, c.Stream, err)
	}
	return nil
}

// prepare checks the arguments every constructor takes and returns cfg
// with its defaults.
func prepare(ctx context.Context, js jetstream.JetStream, cfg *Config) (*Config, error) {
	switch {
	case ctx == nil:
		return nil, fmt.Errorf("%w: ctx is nil", ErrInvalidInput)
	case js == nil:
		return nil, fmt.Errorf("%w: JetStream is nil (use jetstream.New on a connection)", ErrInvalidInput)
	}
	c := cfg.withDefaults()
	if err := c.validate(); err != nil {
		return nil, err
	}
	return c, nil
}

func (c *Config) streamConfig() jetstream.StreamConfig {
	return jetstream.StreamConfig{
		Name:        c.Stream,
		Description: "kfsdb document compilation attempts, published by the relay",
		Subjects:    []string{c.Subject()},
		Retention:   jetstream.InterestPolicy,
		Storage:     c.Storage,
		Replicas:    c.Replicas,
		MaxAge:      c.MaxAge,
		Duplicates:  c.DedupWindow,
	}
}

func (c *Config) consumerConfig() jetstream.ConsumerConfig {
	return jetstream.ConsumerConfig{
		Durable:       c.Consumer,
		Description:   "kfsdb workers",
		FilterSubject: c.Subject(),
		DeliverPolicy: jetstream.DeliverAllPolicy,
		AckPolicy:     jetstream.AckExplicitPolicy,
		AckWait:       c.AckWait,
		MaxDeliver:    c.MaxDeliver,
	}
}
