// Package natsjs is NATS JetStream as kfsdb's broker: a relay.Publisher
// that publishes each outbox message to a stream and waits for the
// stream's acknowledgement, and a worker.Source that receives them from a
// durable pull consumer. It is a separate module so that importers of
// kfsdb's repo, relay and worker never get nats.go in their module graph
// (make check-deps checks it).
//
// The outbox stays the source of truth. The broker's guarantees only make
// delivery faster: a message the broker loses, drops after MaxDeliver or
// expires after MaxAge is published again by the relay once its
// visibility timeout or the attempt's lease runs out.
package natsjs

import (
	"cmp"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/knowledgefs/kfsdb/kfstype"
	"github.com/knowledgefs/kfsdb/repo"
)

// Defaults of Config.
const (
	ConsumerDefault     = "kfsdb-workers"
	DedupWindowDefault  = 2 * time.Minute
	FetchMaxWaitDefault = time.Second
	MaxAgeDefault       = 24 * time.Hour
	MaxDeliverDefault   = 20
	MaxFetchDefault     = 64
	ReplicasDefault     = 1
	StreamDefault       = "KFSDB_COMPILE"
)

// Config names the stream and consumer and sets their options. The
// publisher, the source and EnsureStream of one deployment take the same
// Config. Zero values take the defaults.
type Config struct {
	// AckWait is how long a delivered message may stay unsettled before
	// the broker delivers it again. The worker extends it at every
	// heartbeat, so it only has to cover the wait for the first one.
	// Defaults to LeaseDuration.
	AckWait time.Duration
	// Consumer is the durable pull consumer the workers share. Defaults
	// to "kfsdb-workers".
	Consumer string
	// DedupWindow is how long the stream remembers message ids: a repeat
	// of a publication within it (a publisher's retry after a lost
	// acknowledgement) is stored once. Defaults to 2 min.
	DedupWindow time.Duration
	// FetchMaxWait bounds one pull request of the source. Defaults to 1 s.
	FetchMaxWait time.Duration
	// LeaseDuration is the workers' lease (worker.Config.LeaseDuration),
	// from which AckWait is derived. Defaults to repo.LeaseDurationDefault
	// (60 s).
	LeaseDuration time.Duration
	// MaxAge is how long the stream keeps a message no consumer settled
	// (one that reached MaxDeliver). Defaults to 24 h.
	MaxAge time.Duration
	// MaxDeliver is how often the broker delivers one message before it
	// gives up on it; the relay publishes the attempt again after its
	// visibility timeout or lease. Defaults to 20.
	MaxDeliver int
	// MaxFetch bounds the messages one pull request asks for (it asks for
	// as many as slots wait in Receive). Defaults to 64.
	MaxFetch int
	// Replicas is the stream's replication factor (1..5; 3 tolerates the
	// loss of one server). Defaults to 1.
	Replicas int
	// Storage is the stream's storage. Defaults to jetstream.FileStorage
	// (the zero value).
	Storage jetstream.StorageType
	// Stream is the stream's name. Defaults to "KFSDB_COMPILE".
	Stream string
	// SubjectPrefix is put before the subject "document.compile", with a
	// dot, to keep deployments sharing a NATS account apart. Defaults to
	// none: the subject is "document.compile".
	SubjectPrefix string
}

// Subject is the subject messages are published to.
func (c *Config) Subject() string {
	if c == nil || c.SubjectPrefix == "" {
		return kfstype.EventTypeDocumentCompile
	}
	return c.SubjectPrefix + "." + kfstype.EventTypeDocumentCompile
}

func (c *Config) withDefaults() *Config {
	if c == nil {
		c = &Config{}
	}
	out := *c
	out.Consumer = cmp.Or(c.Consumer, ConsumerDefault)
	out.DedupWindow = cmp.Or(c.DedupWindow, DedupWindowDefault)
	out.FetchMaxWait = cmp.Or(c.FetchMaxWait, FetchMaxWaitDefault)
	out.LeaseDuration = cmp.Or(c.LeaseDuration, repo.LeaseDurationDefault)
	out.AckWait = cmp.Or(c.AckWait, out.LeaseDuration)
	out.MaxAge = cmp.Or(c.MaxAge, MaxAgeDefault)
	out.MaxDeliver = cmp.Or(c.MaxDeliver, MaxDeliverDefault)
	out.MaxFetch = cmp.Or(c.MaxFetch, MaxFetchDefault)
	out.Replicas = cmp.Or(c.Replicas, ReplicasDefault)
	out.Stream = cmp.Or(c.Stream, StreamDefault)
	return &out
}

// validate names the field and the rule.
func (c *Config) validate() error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: %s", ErrInvalidConfig, fmt.Sprintf(format, args...))
	}
	switch {
	case !validName(c.Stream):
		return bad("Stream %q must be non-empty without spaces, dots, '*', '>', '/' or '\\'", c.Stream)
	case !validName(c.Consumer):
		return bad("Consumer %q must be non-empty without spaces, dots, '*', '>', '/' or '\\'", c.Consumer)
	case c.SubjectPrefix != "" && !validPrefix(c.SubjectPrefix):
		return bad("SubjectPrefix %q must be dot-separated tokens without spaces, '*' or '>'", c.SubjectPrefix)
	case c.AckWait < 0 || c.DedupWindow < 0 || c.FetchMaxWait < 0 || c.LeaseDuration < 0 || c.MaxAge < 0:
		return bad("durations must not be negative")
	case c.AckWait < time.Second:
		return bad("AckWait %s must be at least 1 s", c.AckWait)
	case c.FetchMaxWait < 100*time.Millisecond:
		return bad("FetchMaxWait %s must be at least 100 ms", c.FetchMaxWait)
	case c.MaxAge < c.DedupWindow:
		return bad("MaxAge %s is shorter than DedupWindow %s", c.MaxAge, c.DedupWindow)
	case c.MaxDeliver < 1:
		return bad("MaxDeliver must be > 0, got %d", c.MaxDeliver)
	case c.MaxFetch < 1:
		return bad("MaxFetch must be > 0, got %d", c.MaxFetch)
	case c.Replicas < 1 || c.Replicas > 5:
		return bad("Replicas must be 1..5, got %d", c.Replicas)
	case c.Storage != jetstream.FileStorage && c.Storage != jetstream.MemoryStorage:
		return bad("Storage must be jetstream.FileStorage or jetstream.MemoryStorage, got %d", c.Storage)
	}
	return nil
}

// validName is NATS's rule for stream and consumer names.
func validName(s string) bool {
	return s != "" && !strings.ContainsAny(s, " \t\r\n.*>/\\")
}

func validPrefix(s string) bool {
	for tok := range strings.SplitSeq(s, ".") {
		if tok == "" || strings.ContainsAny(tok, " \t\r\n*>") {
			return false
		}
	}
	return true
}
