package benchcli

import (
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/google/uuid"
	"github.com/spf13/cobra"

	"github.com/knowledgefs/kfsdb/bench/kfsdb-bench/delivery"
	"github.com/knowledgefs/kfsdb/cmd/kfsdb/cmdkit"
	"github.com/knowledgefs/kfsdb/migrate/redact"
	"github.com/knowledgefs/kfsdb/observe"
	"github.com/knowledgefs/kfsdb/relay"
	"github.com/knowledgefs/kfsdb/repo"
)

// RelayOpts are the options of Relay.
type RelayOpts struct {
	// DatabaseURL is the database whose outbox to publish. Required; the
	// command line defaults it to $DATABASE_URL.
	DatabaseURL string
	// NATSURL, when set, makes the relay publish to NATS JetStream
	// (comma-separated URLs of one cluster; the stream and consumer are
	// created with natsjs's defaults) instead of printing. Defaults to
	// empty: print.
	NATSURL string
	// Out receives one line per published message (none with NATSURL),
	// and the relay's logs. Required.
	Out io.Writer
	// PollOnly disables LISTEN/NOTIFY (for PgBouncer in transaction
	// pooling mode). Defaults to false.
	PollOnly bool
	// Verbose logs the relay's INFO records too. Defaults to false: WARN
	// and above.
	Verbose bool
	// AsyncProgressCommits is repo.Config.AsyncProgressCommits: claims
	// and marks commit without waiting for the WAL flush. Defaults to
	// false.
	AsyncProgressCommits bool
	// MetricsListen is a host:port to serve Prometheus metrics on, at
	// /metrics, while the relay runs: its counters, statement latencies
	// and the backlog gauges. Defaults to "": off.
	MetricsListen string
}

// Validate reports the first missing or invalid field.
func (o *RelayOpts) Validate() error {
	if err := cmdkit.ValidateDatabaseURL(o.DatabaseURL); err != nil {
		return err
	}
	if err := cmdkit.ValidateMetricsListen(o.MetricsListen); err != nil {
		return err
	}
	if o.Out == nil {
		return errors.New("invalid options: Out is required")
	}
	if o.NATSURL != "" {
		if err := delivery.CheckNATSURL(o.NATSURL); err != nil {
			return fmt.Errorf("invalid options: NATSURL: %w", err)
		}
	}
	return nil
}

// Relay runs the outbox relay against opts.DatabaseURL until ctx ends
// (SIGINT). With opts.NATSURL it publishes to NATS JetStream, for workers
// run with `kfsdb-bench work --delivery nats` (or any natsjs.Source). Without
// it, it publishes through a Publisher that only prints each message and
// answers with a generated job id: a way to watch what the relay would
// publish, or to drain an outbox by hand. It returns nil when ctx ends.
func Relay(ctx context.Context, opts *RelayOpts) error {
	if err := opts.Validate(); err != nil {
		return err
	}
	return runRelay(ctx, opts)
}

// runRelay is Relay on options Validate accepted.
func runRelay(ctx context.Context, opts *RelayOpts) error {
	if err := relayOutbox(ctx, opts); err != nil {
		return errors.New(redact.Text(err.Error(), opts.DatabaseURL))
	}
	return nil
}

func relayOutbox(ctx context.Context, opts *RelayOpts) error {
	out := cmdkit.NewSyncWriter(opts.Out)
	log := cmdkit.NewLogger(out, opts.Verbose)
	pool, reg, closeAll, err := cmdkit.OpenServedPool(ctx, opts.DatabaseURL, 0, opts.MetricsListen, out, log)
	if err != nil {
		return err
	}
	defer closeAll()
	var metrics observe.Metrics
	if reg != nil {
		if metrics, err = runtimeMetrics(reg, nil); err != nil {
			return err
		}
	}
	var pub relay.Publisher = &printingPublisher{out: out}
	target := "printing each message"
	if opts.NATSURL != "" {
		b, err := delivery.DialNATS(ctx, opts.NATSURL, "kfsdb-relay", nil)
		if err != nil {
			return err
		}
		defer b.Close()
		if pub, err = b.Publisher(); err != nil {
			return err
		}
		target = "publishing to NATS subject " + b.Config.Subject()
	}
	rl, err := relay.New(pool, pub, &relay.Config{
		Logger: log, Metrics: metrics, PollOnly: opts.PollOnly,
		Repo: repo.New(&repo.Config{AsyncProgressCommits: opts.AsyncProgressCommits}),
	})
	if err != nil {
		return err
	}
	mode := "LISTEN/NOTIFY and polling"
	if opts.PollOnly {
		mode = "polling only"
	}
	fmt.Fprintf(out, "relay %s running (%s), %s; Ctrl-C stops it\n", rl.ID(), mode, target)
	err = rl.Run(ctx)
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		fmt.Fprintf(out, "relay %s stopped\n", rl.ID())
		return nil
	}
	return err
}

// printingPublisher prints each message and returns a generated job id.
type printingPublisher struct{ out io.Writer }

func (p *printingPublisher) Publish(_ context.Context, msg *relay.Message) (*relay.Publication, error) {
	id := "log-" + uuid.NewString()
	fmt.Fprintf(p.out, "published %s attempt=%s key=%s dispatch_attempt=%d job=%s payload=%s\n",
		msg.EventType, msg.AttemptID, msg.IdempotencyKey, msg.DispatchAttempts, id, msg.Payload)
	return &relay.Publication{QueueJobID: id}, nil
}

// newRelayCommand is `kfsdb-bench relay`, on the root's database URL.
func newRelayCommand(databaseURL *string) *cobra.Command {
	opts := &RelayOpts{}
	cmd := &cobra.Command{
		Use:   "relay",
		Short: "publish the outbox to NATS (--nats-url) or print each message (until Ctrl-C)",
		Args:  cmdkit.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			opts.DatabaseURL, opts.Out = *databaseURL, cmd.OutOrStdout()
			return cmdkit.RunCommand(cmd.Context(), opts, runRelay)
		},
	}
	f := cmd.Flags()
	f.BoolVar(&opts.PollOnly, "poll-only", false, "poll only, no LISTEN/NOTIFY (PgBouncer in transaction pooling mode)")
	f.BoolVar(&opts.Verbose, "verbose", false, "log INFO records too (default: WARN and above)")
	f.BoolVar(&opts.AsyncProgressCommits, "async-progress", false, asyncProgressUsage)
	f.StringVar(&opts.MetricsListen, "metrics-listen", "", cmdkit.MetricsListenUsage)
	f.StringVar(&opts.NATSURL, "nats-url", "", natsURLUsage+" (default: print each message instead of publishing)")
	return cmd
}
