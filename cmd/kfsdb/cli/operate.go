package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/knowledgefs/kfsdb/cmd/kfsdb/delivery"
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
	if err := validateDatabaseURL(o.DatabaseURL); err != nil {
		return err
	}
	if err := validateMetricsListen(o.MetricsListen); err != nil {
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

func validateDatabaseURL(dsn string) error {
	if dsn == "" {
		return fmt.Errorf("invalid options: DatabaseURL is required: pass --database-url or set $%s", EnvDatabaseURL)
	}
	if _, err := pgconn.ParseConfig(dsn); err != nil {
		return fmt.Errorf("invalid options: DatabaseURL is not a valid PostgreSQL URL: %s", redact.Text(err.Error(), dsn))
	}
	return nil
}

// Relay runs the outbox relay against opts.DatabaseURL until ctx ends
// (SIGINT). With opts.NATSURL it publishes to NATS JetStream, for workers
// run with `kfsdb work --delivery nats` (or any natsjs.Source). Without
// it, it publishes through a Publisher that only prints each message and
// answers with a generated job id: a way to watch what the relay would
// publish, or to drain an outbox by hand. It returns nil when ctx ends.
func Relay(ctx context.Context, opts *RelayOpts) error {
	if err := opts.Validate(); err != nil {
		return err
	}
	if err := runRelay(ctx, opts); err != nil {
		return errors.New(redact.Text(err.Error(), opts.DatabaseURL))
	}
	return nil
}

func runRelay(ctx context.Context, opts *RelayOpts) error {
	out := &syncWriter{w: opts.Out}
	log := NewLogger(out, opts.Verbose)
	pool, reg, closeAll, err := openServedPool(ctx, opts.DatabaseURL, 0, opts.MetricsListen, out, log)
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

// PurgeOpts are the options of Purge.
type PurgeOpts struct {
	// BatchSize bounds each delete (1..10,000). Defaults to 1,000.
	BatchSize int32
	// DatabaseURL is the database to purge. Required; the command line
	// defaults it to $DATABASE_URL.
	DatabaseURL string
	// OlderThan is the retention: terminal attempts completed more than
	// this long ago (by the database clock) are deleted. Must be >= 0.
	OlderThan time.Duration
	// Out receives the command's output. Required.
	Out io.Writer
	// TenantID is the tenant whose attempts are purged. Required.
	TenantID string
}

// Validate reports the first missing or invalid field.
func (o *PurgeOpts) Validate() error {
	if err := validateDatabaseURL(o.DatabaseURL); err != nil {
		return err
	}
	switch {
	case o.TenantID == "":
		return errors.New("invalid options: TenantID is required (--tenant)")
	case len(o.TenantID) > repo.MaxTenantIDLength:
		return fmt.Errorf("invalid options: TenantID must be at most %d characters", repo.MaxTenantIDLength)
	case o.OlderThan < 0:
		return fmt.Errorf("invalid options: OlderThan must be >= 0 (--older-than), got %s", o.OlderThan)
	case o.BatchSize < 0 || o.BatchSize > repo.MaxPurgeBatch:
		return fmt.Errorf("invalid options: BatchSize must be 1..%d (or 0 for %d), got %d", repo.MaxPurgeBatch, repo.PurgeBatchSizeDefault, o.BatchSize)
	case o.Out == nil:
		return errors.New("invalid options: Out is required")
	}
	return nil
}

// Purge deletes opts.TenantID's terminal attempts completed before now
// minus opts.OlderThan, batch by batch until a batch comes back short, and
// prints how many went. It returns the count.
func Purge(ctx context.Context, opts *PurgeOpts) (int, error) {
	if err := opts.Validate(); err != nil {
		return 0, err
	}
	n, err := purge(ctx, opts)
	if err != nil {
		return n, errors.New(redact.Text(err.Error(), opts.DatabaseURL))
	}
	return n, nil
}

func purge(ctx context.Context, opts *PurgeOpts) (int, error) {
	pool, err := pgxpool.New(ctx, opts.DatabaseURL)
	if err != nil {
		return 0, fmt.Errorf("could not connect: %w", err)
	}
	defer pool.Close()
	var cutoff time.Time
	// The database's clock set completed_at, so it sets the cut-off too.
	if err := pool.QueryRow(ctx, `SELECT now() - make_interval(secs => $1)`, opts.OlderThan.Seconds()).Scan(&cutoff); err != nil {
		return 0, fmt.Errorf("could not read the database clock: %w", err)
	}
	batch := opts.BatchSize
	if batch == 0 {
		batch = repo.PurgeBatchSizeDefault
	}
	r := repo.New(nil)
	total, batches := 0, 0
	for {
		n, err := r.Purge(ctx, pool, &repo.PurgeParams{TenantID: opts.TenantID, CompletedBefore: cutoff, BatchSize: batch})
		if err != nil {
			fmt.Fprintf(opts.Out, "purged %d attempts before the error\n", total)
			return total, err
		}
		total += n
		batches++
		if n < int(batch) {
			break
		}
	}
	fmt.Fprintf(opts.Out, "purged %d terminal attempts of tenant %q completed before %s (%d batches of up to %d)\n",
		total, opts.TenantID, cutoff.UTC().Format(time.RFC3339), batches, batch)
	return total, nil
}
