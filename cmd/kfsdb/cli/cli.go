// Package cli implements the kfsdb command, the binary operators deploy
// against a production database: argument parsing, and one function per
// command (Migrate, Purge, the attempts/outbox/stuck commands, Console)
// that takes an options struct with a Validate method and writes its output
// to an injected io.Writer, so tests can call the commands directly. No
// command runs a handler or a relay: attempts change only through the
// guarded transitions an operator asks for. What runs a stand-in handler or
// publishes the outbox for a demo or a bench (work, relay, bench) is
// kfsdb-bench (module bench/kfsdb-bench), which reuses Migrate, ParseFlags,
// NewLogger, ExitCode and the exports of kfsdbbench.go; the demo is
// tests/cmd/kfsdb-demo (`make demo`).
package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"

	"github.com/knowledgefs/kfsdb/migrate"
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

kfsdb is the binary operators deploy against a production database: it
migrates kfsdb's schema, inspects attempts and the outbox, and acts on
attempts only through the guarded transitions (cancel, retry, supersede,
purge). It runs no handler and publishes nothing.

Commands:
  migrate up|down|status|version   apply, roll back one, list or show migrations, saying the mode (--lock-timeout D bounds each lock wait)
  migrate sql --up|--down          print the migrations' SQL, for teams whose migrations another tool runs (--from N)
  purge --tenant T --older-than D  delete a tenant's terminal attempts completed before now-D
  attempts list|show --tenant T    find and inspect a tenant's attempts (filters, pages, --json)
  attempts cancel|retry|supersede  act on attempts through the guarded transitions (--tenant, --dry-run, --yes)
  outbox stats                     attempts by state, the outbox's due backlog and its oldest due row
  stuck                            attempts that are not moving, each with the reason
  console --listen 127.0.0.1:8080  web console: overview, attempts, actions (--tenant, --read-only, --auth-token-file)

Run 'kfsdb <command> -h' for a command's flags.

work, relay and bench moved to kfsdb-bench (bench/kfsdb-bench in a kfsdb
checkout): they run a stand-in handler, or publish the outbox, for demos
and benchmarks, and have no place on a production database. The demo is
'make demo' in a kfsdb checkout.
`

// movedToBench are the commands that left this binary for kfsdb-bench,
// with why.
var movedToBench = map[string]string{
	"work":  "it runs a stand-in handler that completes or fails real attempts",
	"bench": "it runs the load driver and its stand-in handler",
	"relay": "it marks outbox rows dispatched to stdout, which no worker reads, or to a NATS stream with natsjs's defaults, not the application's broker",
}

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
	case "purge":
		return runPurge(ctx, rest, stdout, stderr, getenv)
	case "work", "relay", "bench":
		return fmt.Errorf("%w: %s is not part of the deploy binary (%s): run `kfsdb-bench %s` (go build ./bench/kfsdb-bench in a kfsdb checkout)",
			ErrUsage, cmd, movedToBench[cmd], cmd)
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
		fmt.Fprintln(fs.Output(), "Usage: kfsdb migrate [--database-url URL] [--lock-timeout D] up|down|status|version [flags]\n"+
			"       kfsdb migrate sql --up|--down [--from N]\n"+
			"kfsdb records its versions in "+migrate.VersionTable+" and prints the mode it ran in: standalone, platform or platform-seeded.")
		fs.PrintDefaults()
	}
	if err := ParseFlags(fs, args); err != nil {
		return err
	}
	positional := fs.Args()
	if len(positional) > 0 && positional[0] == "sql" {
		return runMigrateSQL(positional[1:], stdout, stderr)
	}
	// Flags may also follow the subcommand (kfsdb migrate up --lock-timeout 2s).
	if len(positional) > 1 {
		if err := ParseFlags(fs, positional[1:]); err != nil {
			return err
		}
		positional = append([]string{positional[0]}, fs.Args()...)
	}
	if len(positional) != 1 {
		fs.Usage()
		return fmt.Errorf("%w: migrate needs exactly one of up, down, status, version, sql", ErrUsage)
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

func runMigrateSQL(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("kfsdb migrate sql", flag.ContinueOnError)
	fs.SetOutput(stderr)
	up := fs.Bool("up", false, "the SQL that applies the migrations after --from, oldest first")
	down := fs.Bool("down", false, "the SQL that rolls back the migrations after --from, newest first")
	opts := &MigrateSQLOpts{Out: stdout}
	fs.Int64Var(&opts.From, "from", 0, "start after this version: 0 (all), 4 (the platform's tables exist, not the seed), 6 (the platform applied the seed)")
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), "Usage: kfsdb migrate sql --up|--down [--from N]\n"+
			"Prints the exact SQL of kfsdb's migrations, in order, to vendor into another tool's migrations; needs no database and records nothing.")
		fs.PrintDefaults()
	}
	if err := ParseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() != 0 || *up == *down {
		fs.Usage()
		return fmt.Errorf("%w: migrate sql needs exactly one of --up, --down and no arguments", ErrUsage)
	}
	opts.Direction = migrate.DirectionUp
	if *down {
		opts.Direction = migrate.DirectionDown
	}
	return MigrateSQL(opts)
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
