// Package cli implements the kfsdb command, the binary operators deploy:
// argument parsing, and one function per command (Migrate, Relay, Purge,
// Work, Bench) that takes an options struct with a Validate method and
// writes its output to an injected io.Writer, so tests can call the
// commands directly. It never imports the test harness: commands run on the
// database a URL names. The demo, which needs a throwaway server, is
// tests/cmd/kfsdb-demo (`make demo`); it reuses Migrate,
// WithScratchDatabase, NewLogger and ExitCode from here.
package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"

	"github.com/knowledgefs/kfsdb/cmd/kfsdb/delivery"
	"github.com/knowledgefs/kfsdb/migrate/redact"
	"github.com/knowledgefs/kfsdb/repo"
)

// EnvDatabaseURL names the environment variable read when --database-url is
// not given.
const EnvDatabaseURL = "DATABASE_URL"

// ErrUsage is returned by Run for bad command lines (unknown command,
// missing argument, invalid flag value); Main exits with status 2 for it.
var ErrUsage = errors.New("usage error")

const usage = `Usage: kfsdb <command> [flags]

Commands:
  migrate up|down|status|version   apply, roll back one, list or show migrations (--lock-timeout D bounds each lock wait)
  relay                            publish the outbox to NATS (--nats-url) or print each message (until Ctrl-C)
  purge --tenant T --older-than D  delete a tenant's terminal attempts completed before now-D
  work                             run workers on a database's attempts for a while (--delivery postgres|relay|nats), then print counters
  attempts list|show --tenant T    find and inspect a tenant's attempts (filters, pages, --json)
  attempts cancel|retry|supersede  act on attempts through the guarded transitions (--tenant, --dry-run, --yes)
  outbox stats                     attempts by state, the outbox's due backlog and its oldest due row
  stuck                            attempts that are not moving, each with the reason
  console --listen 127.0.0.1:8080  web console: overview, attempts, actions (--tenant, --read-only, --auth-token-file)
  bench                            lifecycle load driver: producers and workers on a scratch database of the server, with a report

Run 'kfsdb <command> -h' for a command's flags. The demo and a bench on a
throwaway server need the test harness: run 'make demo' or 'make bench-kfsdb'
in a kfsdb checkout.
`

// Main runs the command line args and returns the process exit code (see
// ExitCode).
func Main(ctx context.Context, args []string, stdout, stderr io.Writer, getenv func(string) string) int {
	return ExitCode("kfsdb", Run(ctx, args, stdout, stderr, getenv), stderr, getenv)
}

// ExitCode reports err, a command's result, on stderr as "name: message"
// with passwords redacted (also $DATABASE_URL's, wherever it appears), and
// returns the process exit code: 0 for nil and for -h (flag.ErrHelp), 2 for
// usage errors (ErrUsage), 1 for any other error.
func ExitCode(name string, err error, stderr io.Writer, getenv func(string) string) int {
	if err == nil || errors.Is(err, flag.ErrHelp) {
		return 0
	}
	fmt.Fprintf(stderr, "%s: %s\n", name, escapeControls(redact.Text(err.Error(), envDatabaseURL(getenv))))
	if errors.Is(err, ErrUsage) {
		return 2
	}
	return 1
}

// Run parses args (without the program name) and runs the command, with
// confirmations read from os.Stdin. getenv supplies DATABASE_URL.
func Run(ctx context.Context, args []string, stdout, stderr io.Writer, getenv func(string) string) error {
	return RunWithInput(ctx, args, os.Stdin, stdout, stderr, getenv)
}

// RunWithInput is Run with the confirmations read from stdin.
//
// Everything a command writes goes through TermSafe: text from the
// database (tenant ids, worker ids, error messages, reasons) reaches the
// operator's terminal with its control characters escaped.
func RunWithInput(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer, getenv func(string) string) error {
	stdout, stderr = TermSafe(stdout), TermSafe(stderr)
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return fmt.Errorf("%w: no command", ErrUsage)
	}
	switch cmd, rest := args[0], args[1:]; cmd {
	case "migrate":
		return runMigrate(ctx, rest, stdout, stderr, getenv)
	case "demo":
		return fmt.Errorf("%w: demo needs a throwaway server and is not part of the kfsdb binary: run `make demo` in a kfsdb checkout", ErrUsage)
	case "relay":
		return runRelayCmd(ctx, rest, stdout, stderr, getenv)
	case "purge":
		return runPurge(ctx, rest, stdout, stderr, getenv)
	case "bench":
		return runBench(ctx, args[1:], stdout, stderr, getenv)
	case "work":
		return runWork(ctx, rest, stdout, stderr, getenv)
	case "attempts":
		return runAttempts(ctx, rest, stdin, stdout, stderr, getenv)
	case "outbox":
		return runOutbox(ctx, rest, stdout, stderr, getenv)
	case "stuck":
		return runStuck(ctx, rest, stdout, stderr, getenv)
	case "console":
		return runConsole(ctx, rest, stdout, stderr, getenv)
	case "-h", "-help", "--help", "help":
		fmt.Fprint(stdout, usage)
		return nil
	default:
		fmt.Fprint(stderr, usage)
		return fmt.Errorf("%w: unknown command %q", ErrUsage, cmd)
	}
}

func runMigrate(ctx context.Context, args []string, stdout, stderr io.Writer, getenv func(string) string) error {
	fs := flag.NewFlagSet("kfsdb migrate", flag.ContinueOnError)
	fs.SetOutput(stderr)
	opts := &MigrateOpts{Out: stdout}
	fs.StringVar(&opts.DatabaseURL, "database-url", "", "PostgreSQL URL; defaults to $"+EnvDatabaseURL)
	fs.DurationVar(&opts.LockTimeout, "lock-timeout", 0,
		"PostgreSQL lock_timeout of the migration session (e.g. 2s): a migration whose statement waits longer for a lock fails and is rolled back, "+
			"instead of queueing the application's queries on that table behind it; 0 keeps the server's setting")
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), "Usage: kfsdb migrate [--database-url URL] [--lock-timeout D] up|down|status|version [flags]")
		fs.PrintDefaults()
	}
	if err := ParseFlags(fs, args); err != nil {
		return err
	}
	// Flags may also follow the subcommand (kfsdb migrate up --lock-timeout 2s).
	positional := fs.Args()
	if len(positional) > 1 {
		if err := ParseFlags(fs, positional[1:]); err != nil {
			return err
		}
		positional = append([]string{positional[0]}, fs.Args()...)
	}
	if len(positional) != 1 {
		fs.Usage()
		return fmt.Errorf("%w: migrate needs exactly one of up, down, status, version", ErrUsage)
	}
	opts.Command = MigrateCommand(positional[0])
	if opts.DatabaseURL == "" {
		opts.DatabaseURL = getenv(EnvDatabaseURL)
	}
	if err := opts.Validate(); err != nil {
		return fmt.Errorf("%w: %w", ErrUsage, err)
	}
	return Migrate(ctx, opts)
}

func runRelayCmd(ctx context.Context, args []string, stdout, stderr io.Writer, getenv func(string) string) error {
	fs := flag.NewFlagSet("kfsdb relay", flag.ContinueOnError)
	fs.SetOutput(stderr)
	opts := &RelayOpts{Out: stdout}
	fs.StringVar(&opts.DatabaseURL, "database-url", "", "PostgreSQL URL; defaults to $"+EnvDatabaseURL)
	fs.BoolVar(&opts.PollOnly, "poll-only", false, "poll only, no LISTEN/NOTIFY (PgBouncer in transaction pooling mode)")
	fs.BoolVar(&opts.Verbose, "verbose", false, "log INFO records too (default: WARN and above)")
	fs.BoolVar(&opts.AsyncProgressCommits, "async-progress", false, asyncProgressUsage)
	fs.StringVar(&opts.MetricsListen, "metrics-listen", "", metricsListenUsage)
	fs.StringVar(&opts.NATSURL, "nats-url", "", natsURLUsage+" (default: print each message instead of publishing)")
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), "Usage: kfsdb relay [--database-url URL] [--nats-url URL] [--poll-only] [--async-progress] [--metrics-listen ADDR] [--verbose]")
		fs.PrintDefaults()
	}
	if err := ParseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() != 0 {
		fs.Usage()
		return fmt.Errorf("%w: relay takes no arguments", ErrUsage)
	}
	if opts.DatabaseURL == "" {
		opts.DatabaseURL = getenv(EnvDatabaseURL)
	}
	if err := opts.Validate(); err != nil {
		return fmt.Errorf("%w: %w", ErrUsage, err)
	}
	return Relay(ctx, opts)
}

func runPurge(ctx context.Context, args []string, stdout, stderr io.Writer, getenv func(string) string) error {
	fs := flag.NewFlagSet("kfsdb purge", flag.ContinueOnError)
	fs.SetOutput(stderr)
	opts := &PurgeOpts{Out: stdout}
	fs.StringVar(&opts.DatabaseURL, "database-url", "", "PostgreSQL URL; defaults to $"+EnvDatabaseURL)
	fs.StringVar(&opts.TenantID, "tenant", "", "tenant whose attempts to purge (required)")
	fs.DurationVar(&opts.OlderThan, "older-than", -1, "retention: purge terminal attempts completed longer ago than this, e.g. 720h (required)")
	batch := fs.Int("batch", 0, fmt.Sprintf("attempts per delete, 1..%d (default %d)", repo.MaxPurgeBatch, repo.PurgeBatchSizeDefault))
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), "Usage: kfsdb purge --tenant T --older-than DURATION [--batch N] [--database-url URL]")
		fs.PrintDefaults()
	}
	if err := ParseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() != 0 {
		fs.Usage()
		return fmt.Errorf("%w: purge takes no arguments", ErrUsage)
	}
	if opts.OlderThan == -1 {
		fs.Usage()
		return fmt.Errorf("%w: --older-than is required (0 purges every terminal attempt)", ErrUsage)
	}
	if *batch < 0 || *batch > repo.MaxPurgeBatch {
		return fmt.Errorf("%w: --batch must be 1..%d", ErrUsage, repo.MaxPurgeBatch)
	}
	opts.BatchSize = int32(*batch)
	if opts.DatabaseURL == "" {
		opts.DatabaseURL = getenv(EnvDatabaseURL)
	}
	if err := opts.Validate(); err != nil {
		return fmt.Errorf("%w: %w", ErrUsage, err)
	}
	_, err := Purge(ctx, opts)
	return err
}

func runWork(ctx context.Context, args []string, stdout, stderr io.Writer, getenv func(string) string) error {
	fs := flag.NewFlagSet("kfsdb work", flag.ContinueOnError)
	fs.SetOutput(stderr)
	opts := &WorkOpts{Out: stdout}
	fs.StringVar(&opts.DatabaseURL, "database-url", "", "PostgreSQL URL; defaults to $"+EnvDatabaseURL)
	fs.Var(&opts.Delivery, "delivery", delivery.Usage)
	fs.StringVar(&opts.NATSURL, "nats-url", "", natsURLUsage+" (--delivery nats only)")
	fs.DurationVar(&opts.Duration, "duration", WorkDurationDefault, "how long to run (Ctrl-C stops earlier)")
	fs.IntVar(&opts.Workers, "workers", WorkWorkersDefault, "workers to run (1..64)")
	fs.IntVar(&opts.Concurrency, "concurrency", WorkConcurrencyDefault, "deliveries each worker runs at once (1..64)")
	fs.DurationVar(&opts.LeaseDuration, "lease", 0, "worker lease (default: the worker's, 60s)")
	fs.DurationVar(&opts.VisibilityTimeout, "visibility", 0, "relay delivery: republish a message no worker took within this (default: the relay's, 60s)")
	fs.DurationVar(&opts.StepDelay, "step-delay", WorkStepDelayDefault, "time the handler spends on each checkpoint")
	fs.Float64Var(&opts.FailRate, "fail-rate", 0, "fraction (0..1) of executions that fail on purpose ("+ErrorCodeInjectedFailure+")")
	fs.StringVar(&opts.ID, "id", "", "prefix of the workers' (and relay's) ids (default work-<host>-<pid>)")
	fs.BoolVar(&opts.PollOnly, "poll-only", false, "poll only, no LISTEN/NOTIFY (PgBouncer in transaction pooling mode)")
	fs.BoolVar(&opts.Verbose, "verbose", false, "log INFO records too (default: WARN and above)")
	fs.BoolVar(&opts.AsyncProgressCommits, "async-progress", false, asyncProgressUsage)
	fs.StringVar(&opts.MetricsListen, "metrics-listen", "", metricsListenUsage)
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), "Usage: kfsdb work [--database-url URL] [--delivery postgres|relay|nats] [--nats-url URL] [--duration D] [--workers N] [--concurrency N] [--lease D] [--visibility D] [--step-delay D] [--fail-rate F] [--id ID] [--poll-only] [--async-progress] [--metrics-listen ADDR] [--verbose]")
		fs.PrintDefaults()
	}
	if err := ParseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() != 0 {
		fs.Usage()
		return fmt.Errorf("%w: work takes no arguments", ErrUsage)
	}
	if opts.DatabaseURL == "" {
		opts.DatabaseURL = getenv(EnvDatabaseURL)
	}
	if err := opts.Validate(); err != nil {
		return fmt.Errorf("%w: %w", ErrUsage, err)
	}
	_, err := Work(ctx, opts)
	return err
}

// natsURLUsage is the --nats-url flag's help text.
const natsURLUsage = "NATS server, e.g. nats://127.0.0.1:4222 (comma-separated for a cluster); the JetStream stream and consumer are created if missing"

// ParseFlags parses args with fs. Every error but -h (flag.ErrHelp, which
// fs already answered with its usage) wraps ErrUsage.
func ParseFlags(fs *flag.FlagSet, args []string) error {
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return fmt.Errorf("%w: %w", ErrUsage, err)
	}
	return nil
}

// envDatabaseURL returns $DATABASE_URL, or "" when getenv is nil.
func envDatabaseURL(getenv func(string) string) string {
	if getenv == nil {
		return ""
	}
	return getenv(EnvDatabaseURL)
}

const asyncProgressUsage = "claims, marks, leases, heartbeats and checkpoints commit without waiting for the WAL flush; a crash can make them be redone (repo.Config.AsyncProgressCommits)"
