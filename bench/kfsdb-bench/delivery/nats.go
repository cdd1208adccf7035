package delivery

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/knowledgefs/kfsdb/adapters/natsjs"
)

// ErrNATSURL is returned by CheckNATS for a missing, superfluous or
// malformed NATS URL.
var ErrNATSURL = errors.New("bad --nats-url")

// connectTimeout bounds the first connection: a command given a wrong
// URL fails at once instead of retrying in the background.
const connectTimeout = 5 * time.Second

// CheckNATS checks natsURL against mode m: the nats mode needs one, the
// others take none, and it must be a comma-separated list of
// nats://, tls://, ws:// or wss:// URLs with a host and a port.
func CheckNATS(m Mode, natsURL string) error {
	switch {
	case m == NATS && natsURL == "":
		return fmt.Errorf("%w: --delivery nats needs --nats-url, e.g. nats://127.0.0.1:4222", ErrNATSURL)
	case m != NATS && natsURL != "":
		return fmt.Errorf("%w: --nats-url is for --delivery nats, not %s", ErrNATSURL, m.String())
	}
	if natsURL == "" {
		return nil
	}
	return CheckNATSURL(natsURL)
}

// CheckNATSURL checks a comma-separated list of NATS server URLs.
func CheckNATSURL(natsURL string) error {
	for u := range strings.SplitSeq(natsURL, ",") {
		p, err := url.Parse(strings.TrimSpace(u))
		if err != nil {
			return fmt.Errorf("%w %q: %w", ErrNATSURL, u, err)
		}
		switch p.Scheme {
		case "nats", "tls", "ws", "wss":
		default:
			return fmt.Errorf("%w %q: want a nats://, tls://, ws:// or wss:// URL", ErrNATSURL, u)
		}
		if _, port, err := net.SplitHostPort(p.Host); err != nil || port == "" || p.Hostname() == "" {
			return fmt.Errorf("%w %q: want host:port, e.g. nats://127.0.0.1:4222", ErrNATSURL, u)
		}
	}
	return nil
}

// Broker is a connection to NATS JetStream whose stream and consumer
// exist (natsjs.EnsureStream).
type Broker struct {
	// Config is the stream's and consumer's configuration.
	Config *natsjs.Config
	conn   *nats.Conn
	js     jetstream.JetStream
}

// DialNATS connects to natsURL and ensures cfg's stream and consumer. The
// connection then reconnects forever: a broker outage delays delivery,
// the outbox keeps the attempts.
func DialNATS(ctx context.Context, natsURL, name string, cfg *natsjs.Config) (*Broker, error) {
	if err := CheckNATSURL(natsURL); err != nil {
		return nil, err
	}
	nc, err := nats.Connect(natsURL, nats.Name(name), nats.Timeout(connectTimeout), nats.MaxReconnects(-1))
	if err != nil {
		return nil, fmt.Errorf("could not connect to NATS: %w", err)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		nc.Close()
		return nil, fmt.Errorf("could not use JetStream: %w", err)
	}
	ectx, cancel := context.WithTimeout(ctx, 2*connectTimeout)
	defer cancel()
	if err := natsjs.EnsureStream(ectx, js, cfg); err != nil {
		nc.Close()
		return nil, err
	}
	return &Broker{Config: cfg, conn: nc, js: js}, nil
}

// Publisher returns a relay.Publisher to the stream.
func (b *Broker) Publisher() (*natsjs.Publisher, error) { return natsjs.NewPublisher(b.js, b.Config) }

// Source returns a worker.Source on the consumer.
func (b *Broker) Source(ctx context.Context) (*natsjs.Source, error) {
	return natsjs.NewSource(ctx, b.js, b.Config)
}

// DeleteStream deletes the stream and its consumer, for a run's own
// stream (kfsdb-bench bench).
func (b *Broker) DeleteStream(ctx context.Context) error {
	return b.js.DeleteStream(ctx, cmp.Or(b.Config.Stream, natsjs.StreamDefault))
}

// Close flushes and closes the connection (nil-safe).
func (b *Broker) Close() {
	if b != nil && b.conn != nil {
		_ = b.conn.Drain()
	}
}
