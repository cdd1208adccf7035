package natsjs_test

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/knowledgefs/kfsdb/adapters/natsjs"
	"github.com/knowledgefs/kfsdb/relay"
)

func TestBadInputIsRefused(t *testing.T) {
	t.Parallel()
	ctx := context.Background()

	t.Run("NilJetStream", func(t *testing.T) {
		t.Parallel()
		_, err := natsjs.NewPublisher(nil, nil)
		require.ErrorIs(t, err, natsjs.ErrInvalidInput)
		_, err = natsjs.NewSource(ctx, nil, nil)
		require.ErrorIs(t, err, natsjs.ErrInvalidInput)
		require.ErrorIs(t, natsjs.EnsureStream(ctx, nil, nil), natsjs.ErrInvalidInput)
	})

	t.Run("NilReceivers", func(t *testing.T) {
		t.Parallel()
		var p *natsjs.Publisher
		_, err := p.Publish(ctx, &relay.Message{IdempotencyKey: "k"})
		require.ErrorIs(t, err, natsjs.ErrInvalidInput)
		var s *natsjs.Source
		_, err = s.Receive(ctx)
		require.ErrorIs(t, err, natsjs.ErrInvalidInput)
	})

	t.Run("BadConfig", func(t *testing.T) {
		t.Parallel()
		node := startNode(t)
		_, js := connect(t, node.URL)
		for name, cfg := range map[string]natsjs.Config{
			"stream with a dot":       {Stream: "A.B"},
			"stream with a space":     {Stream: " "},
			"consumer with wildcard":  {Consumer: "w*"},
			"prefix with empty token": {SubjectPrefix: "a..b"},
			"prefix with wildcard":    {SubjectPrefix: "a.>"},
			"replicas 7":              {Replicas: 7},
			"negative replicas":       {Replicas: -1},
			"max deliver":             {MaxDeliver: -1},
			"max fetch":               {MaxFetch: -2},
			"ack wait under 1 s":      {AckWait: 10 * time.Millisecond},
			"negative dedup":          {DedupWindow: -time.Second},
			"max age under dedup":     {MaxAge: time.Minute, DedupWindow: 2 * time.Minute},
			"fetch wait":              {FetchMaxWait: time.Millisecond},
			"storage":                 {Storage: jetstream.StorageType(9)},
		} {
			_, err := natsjs.NewPublisher(js, &cfg)
			require.ErrorIs(t, err, natsjs.ErrInvalidConfig, name)
			require.ErrorIs(t, natsjs.EnsureStream(ctx, js, &cfg), natsjs.ErrInvalidConfig, name)
		}
		_, err := natsjs.NewSource(ctx, js, &natsjs.Config{Stream: "MISSING"})
		require.ErrorContains(t, err, "EnsureStream creates it")
	})

	t.Run("BadMessages", func(t *testing.T) {
		t.Parallel()
		node := startNode(t)
		_, js := connect(t, node.URL)
		p, err := natsjs.NewPublisher(js, nil)
		require.NoError(t, err)
		_, err = p.Publish(ctx, nil)
		require.ErrorIs(t, err, natsjs.ErrInvalidInput)
		_, err = p.Publish(ctx, &relay.Message{})
		require.ErrorIs(t, err, natsjs.ErrInvalidInput)
		//lint:ignore SA1012 a nil context must be refused, not panic
		_, err = p.Publish(nil, &relay.Message{IdempotencyKey: "k"})
		require.ErrorIs(t, err, natsjs.ErrInvalidInput)
	})

	t.Run("Subject", func(t *testing.T) {
		t.Parallel()
		require.Equal(t, "document.compile", (&natsjs.Config{}).Subject())
		require.Equal(t, "acme.eu.document.compile", (&natsjs.Config{SubjectPrefix: "acme.eu"}).Subject())
		var nilCfg *natsjs.Config
		require.Equal(t, "document.compile", nilCfg.Subject())
	})
}
