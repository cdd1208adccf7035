package faultload

import (
	"cmp"
	"fmt"
	"log/slog"
	"time"

	"github.com/knowledgefs/kfsdb/repo"
)

// Path is a delivery path.
type Path string

// The delivery paths.
const (
	// DirectListen is pgsource direct delivery, woken by LISTEN.
	DirectListen Path = "direct-listen"
	// DirectPoll is pgsource direct delivery, polling only (PgBouncer).
	DirectPoll Path = "direct-poll"
	// RelayMemqueue is the relay publishing to an in-process memqueue,
	// workers acquiring leases.
	RelayMemqueue Path = "relay-memqueue"
	// RelayNATS is the relay publishing to NATS JetStream, workers
	// receiving from a durable pull consumer and acquiring leases.
	RelayNATS Path = "relay-nats"
)

// Paths lists every delivery path.
func Paths() []Path { return []Path{DirectListen, DirectPoll, RelayMemqueue, RelayNATS} }

// Config configures a run. Zero values take the defaults.
type Config struct {
	// Path is the delivery path. Required.
	Path Path
	// URL is the app's database URL (a migrated database the run uses
	// alone). It may name several hosts with
	// target_session_attrs=read-write. Required.
	URL string
	// NATSURL is the NATS server of RelayNATS. Defaults to a JetStream
	// server the run starts in the process (tests/natstest), stopped at
	// the test's cleanup.
	NATSURL string
	// Repo is the Repo every caller uses (AsyncProgressCommits, …).
	// Defaults to repo.New(nil).
	Repo *repo.Repo

	// Upfront is how many attempts are started before the workers run.
	Upfront int
	// Documents is how many attempts the producers start while the run
	// goes on (after Upfront).
	Documents int
	// Producers is how many producers start them. Defaults to 2.
	Producers int
	// Interval is each producer's pause after a Start: the steady rate is
	// Producers per Interval. Defaults to 20 ms.
	Interval time.Duration
	// InTxFraction is the fraction (0..1) of the producers' Starts made
	// inside the app's own transaction, beside an app write. Defaults to
	// 0.
	InTxFraction float64

	// Workers is how many workers run, each with its own source.
	// Defaults to 4.
	Workers int
	// Concurrency is each worker's slots. Defaults to 2.
	Concurrency int
	// LeaseDuration is the workers' lease. Defaults to 2 s.
	LeaseDuration time.Duration
	// StepDelay is the handler's work before each checkpoint. Defaults to
	// 25 ms.
	StepDelay time.Duration
	// MaxExecutionAttempts is each attempt's budget: faults cost
	// execution attempts and none may run out. Defaults to 50.
	MaxExecutionAttempts int32

	// CallTimeout bounds each of the run's own database calls (a Start,
	// a read). Defaults to 5 s.
	CallTimeout time.Duration
	// StartRetryFor is how long a producer keeps retrying one Start
	// before it gives up on the document (counted). Defaults to 2 min.
	StartRetryFor time.Duration
	// Stall is how long a wait (WaitCompleted, Finish's drain) may see
	// nothing progress before it gives up. Defaults to 60 s.
	Stall time.Duration
	// DrainTimeout bounds Finish's wait for every attempt to end, however
	// it progresses. Defaults to 10 min.
	DrainTimeout time.Duration

	// Probe runs a prober that asks three questions with known answers
	// (read a canceled attempt, cancel it again, heartbeat a made-up lease
	// on it) all along; a wrong final answer is a problem.
	Probe bool
	// Logger receives the runtime's logs. Defaults to discarding them.
	Logger *slog.Logger
}

func (c *Config) withDefaults() (*Config, error) {
	if c == nil {
		return nil, fmt.Errorf("faultload: nil Config")
	}
	out := *c
	out.Producers = cmp.Or(c.Producers, 2)
	out.Interval = cmp.Or(c.Interval, 20*time.Millisecond)
	out.Workers = cmp.Or(c.Workers, 4)
	out.Concurrency = cmp.Or(c.Concurrency, 2)
	out.LeaseDuration = cmp.Or(c.LeaseDuration, 2*time.Second)
	out.StepDelay = cmp.Or(c.StepDelay, 25*time.Millisecond)
	out.MaxExecutionAttempts = cmp.Or(c.MaxExecutionAttempts, 50)
	out.CallTimeout = cmp.Or(c.CallTimeout, 5*time.Second)
	out.StartRetryFor = cmp.Or(c.StartRetryFor, 2*time.Minute)
	out.Stall = cmp.Or(c.Stall, time.Minute)
	out.DrainTimeout = cmp.Or(c.DrainTimeout, 10*time.Minute)
	if out.Repo == nil {
		out.Repo = repo.New(nil)
	}
	if out.Logger == nil {
		out.Logger = slog.New(slog.DiscardHandler)
	}
	switch {
	case out.URL == "":
		return nil, fmt.Errorf("faultload: Config.URL is required")
	case out.Upfront < 0 || out.Documents < 0 || out.Upfront+out.Documents == 0:
		return nil, fmt.Errorf("faultload: Config.Upfront %d and Documents %d must be >= 0, not both 0", out.Upfront, out.Documents)
	case out.InTxFraction < 0 || out.InTxFraction > 1:
		return nil, fmt.Errorf("faultload: Config.InTxFraction %v must be in 0..1", out.InTxFraction)
	case out.Producers < 1 || out.Workers < 1 || out.Concurrency < 1:
		return nil, fmt.Errorf("faultload: Config.Producers, Workers and Concurrency must be positive")
	}
	for _, p := range Paths() {
		if out.Path == p {
			return &out, nil
		}
	}
	return nil, fmt.Errorf("faultload: Config.Path %q is none of %v", out.Path, Paths())
}
