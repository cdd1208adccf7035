// Package cli implements the kfsdb command: argument parsing, and one
// function per command (Migrate, Demo) that takes an options struct with a
// Validate method and writes its output to an injected io.Writer, so tests can
// call the commands directly.
package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"

	"github.com/knowledgefs/kfsdb/tests/pgtest"
)

// EnvDatabaseURL names the environment variable read when --database-url is
// not given.
const EnvDatabaseURL = "DATABASE_URL"

// ErrUsage is returned by Run for bad command lines (unknown command,
// missing argument, invalid flag value); Main exits with status 2 for it.
var ErrUsage = errors.New("usage error")

const usage = `Usage: kfsdb <command> [flags]

Commands:
  migrate up|down|status|version   apply, roll back one, list or show migrations
  demo                             migrate a throwaway database and show its status

Run 'kfsdb <command> -h' for a command's flags.
`

// Main runs the command line args and returns the process exit code: 0 on
// success (and for -h), 2 for usage errors, 1 for any other error. Errors go
// to stderr with passwords redacted.
func Main(ctx context.Context, args []string, stdout, stderr io.Writer, getenv func(string) string) int {
	err := Run(ctx, args, stdout, stderr, getenv)
	switch {
	case err == nil, errors.Is(err, flag.ErrHelp):
		return 0
	case errors.Is(err, ErrUsage):
		fmt.Fprintf(stderr, "kfsdb: %s\n", redact(err.Error(), getenv))
		return 2
	default:
		fmt.Fprintf(stderr, "kfsdb: %s\n", redact(err.Error(), getenv))
		return 1
	}
}

// Run parses args (without the program name) and runs the command. getenv
// supplies DATABASE_URL and, for demo, pgtest's variables are read from the
// process environment.
func Run(ctx context.Context, args []string, stdout, stderr io.Writer, getenv func(string) string) error {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return fmt.Errorf("%w: no command", ErrUsage)
	}
	switch cmd, rest := args[0], args[1:]; cmd {
	case "migrate":
		return runMigrate(ctx, rest, stdout, stderr, getenv)
	case "demo":
		return runDemo(ctx, rest, stdout, stderr, getenv)
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
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), "Usage: kfsdb migrate [--database-url URL] up|down|status|version")
		fs.PrintDefaults()
	}
	if err := parse(fs, args); err != nil {
		return err
	}
	if fs.NArg() != 1 {
		fs.Usage()
		return fmt.Errorf("%w: migrate needs exactly one of up, down, status, version", ErrUsage)
	}
	opts.Command = MigrateCommand(fs.Arg(0))
	if opts.DatabaseURL == "" {
		opts.DatabaseURL = getenv(EnvDatabaseURL)
	}
	if err := opts.Validate(); err != nil {
		return fmt.Errorf("%w: %w", ErrUsage, err)
	}
	return Migrate(ctx, opts)
}

func runDemo(ctx context.Context, args []string, stdout, stderr io.Writer, getenv func(string) string) error {
	fs := flag.NewFlagSet("kfsdb demo", flag.ContinueOnError)
	fs.SetOutput(stderr)
	opts := &DemoOpts{Out: stdout}
	fs.StringVar(&opts.DatabaseURL, "database-url", "",
		"server to create the demo database on; defaults to $"+EnvDatabaseURL+", else a throwaway server (see pgtest: KFS_TEST_DATABASE_URL, KFS_TEST_POSTGRES_IMAGE)")
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), "Usage: kfsdb demo [--database-url URL]")
		fs.PrintDefaults()
	}
	if err := parse(fs, args); err != nil {
		return err
	}
	if fs.NArg() != 0 {
		fs.Usage()
		return fmt.Errorf("%w: demo takes no arguments", ErrUsage)
	}
	if opts.DatabaseURL == "" {
		opts.DatabaseURL = getenv(EnvDatabaseURL)
	}
	if err := opts.Validate(); err != nil {
		return fmt.Errorf("%w: %w", ErrUsage, err)
	}
	return Demo(ctx, opts)
}

func parse(fs *flag.FlagSet, args []string) error {
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return fmt.Errorf("%w: %w", ErrUsage, err)
	}
	return nil
}

// redact removes passwords from s: those in URLs and keyword/value strings,
// and the literal password of DATABASE_URL wherever it appears.
func redact(s string, getenv func(string) string) string {
	s = pgtest.RedactURL(s)
	if getenv != nil {
		if pw := passwordOf(getenv(EnvDatabaseURL)); pw != "" {
			s = strings.ReplaceAll(s, pw, "xxxxx")
		}
	}
	return s
}
