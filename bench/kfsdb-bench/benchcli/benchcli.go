// Package benchcli implements kfsdb-bench, the bench and demo binary:
// work (workers with a stand-in handler on a database's attempts), relay
// (the outbox published to stdout or NATS) and bench (the lifecycle load
// driver on a scratch database). Each command is one function taking an
// options struct with a Validate method, writing to an injected io.Writer,
// so tests call the commands directly. They run a stand-in handler or a
// relay that is no application's, so they left the deploy binary
// (cmd/kfsdb), whose migrate, exit codes, flag validations and metrics
// serving they reuse; their flag parsing and logging are this package's
// (ParseFlags, NewLogger), which the demo reuses. WithScratchDatabase gives the demo
// (tests/cmd/kfsdb-demo) its migrated scratch database too.
package benchcli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"strings"

	"github.com/knowledgefs/kfsdb/cmd/kfsdb/cli"
)

const usage = `Usage: kfsdb-bench <command> [flags]

kfsdb-bench runs kfsdb's stand-in handler, relay and load driver for demos
and benchmarks. Never point work or relay at a production database: work
completes (or fails) the attempts it finds with nothing compiled, and relay
marks outbox rows dispatched to stdout or to a NATS stream of natsjs's
defaults. Operators' commands are in the deploy binary, kfsdb.

Commands:
  work    run workers on a database's attempts for a while (--delivery postgres|relay|nats), then print counters
  relay   publish the outbox to NATS (--nats-url) or print each message (until Ctrl-C)
  bench   lifecycle load driver: producers and workers on a scratch database of the server, with a report

Run 'kfsdb-bench <command> -h' for a command's flags. A bench on a
throwaway server needs the test harness: run 'make bench-kfsdb' in a kfsdb
checkout.
`

// Main runs the command line args and returns the process exit code
// (cli.ExitCode: 0, 1, or 2 for usage errors).
func Main(ctx context.Context, args []string, stdout, stderr io.Writer, getenv func(string) string) int {
	return cli.ExitCode("kfsdb-bench", Run(ctx, args, stdout, stderr, getenv), stderr, getenv)
}

// Run parses args (without the program name) and runs the command. getenv
// supplies DATABASE_URL.
func Run(ctx context.Context, args []string, stdout, stderr io.Writer, getenv func(string) string) error {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return fmt.Errorf("%w: no command", cli.ErrUsage)
	}
	switch cmd, rest := args[0], args[1:]; cmd {
	case "work":
		return runWork(ctx, rest, stdout, stderr, getenv)
	case "relay":
		return runRelayCmd(ctx, rest, stdout, stderr, getenv)
	case "bench":
		return runBench(ctx, rest, stdout, stderr, getenv)
	case "-h", "-help", "--help", "help":
		fmt.Fprint(stdout, usage)
		return nil
	default:
		fmt.Fprint(stderr, usage)
		return fmt.Errorf("%w: unknown command %q", cli.ErrUsage, cmd)
	}
}

// ParseFlags parses args with fs, kfsdb-bench's and the demo's flag
// parsing. Every error but -h (flag.ErrHelp, which fs already answered
// with its usage, and cli.ExitCode turns into status 0) wraps
// cli.ErrUsage.
func ParseFlags(fs *flag.FlagSet, args []string) error {
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return fmt.Errorf("%w: %w", cli.ErrUsage, err)
	}
	return nil
}

// NewLogger returns the commands' logger: WARN and above (INFO and above
// when verbose) to out as one text line per record, without times or stack
// traces. The demo (tests/cmd/kfsdb-demo) logs through it too.
func NewLogger(out io.Writer, verbose bool) *slog.Logger {
	level := slog.LevelWarn
	if verbose {
		level = slog.LevelInfo
	}
	return slog.New(slog.NewTextHandler(out, &slog.HandlerOptions{
		Level: level,
		ReplaceAttr: func(groups []string, a slog.Attr) slog.Attr {
			if len(groups) == 0 && (a.Key == slog.TimeKey || a.Key == "stack") {
				return slog.Attr{}
			}
			return a
		},
	}))
}

// parseCommand gives fs its usage line, parses args (ParseFlags) and
// refuses positional arguments: no command takes any.
func parseCommand(fs *flag.FlagSet, args []string, usage string) error {
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), usage)
		fs.PrintDefaults()
	}
	if err := ParseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() != 0 {
		fs.Usage()
		return fmt.Errorf("%w: %s takes no arguments", cli.ErrUsage, strings.TrimPrefix(fs.Name(), "kfsdb-bench "))
	}
	return nil
}

// natsURLUsage is the --nats-url flag's help text.
const natsURLUsage = "NATS server, e.g. nats://127.0.0.1:4222 (comma-separated for a cluster); the JetStream stream and consumer are created if missing"

const asyncProgressUsage = "claims, marks, leases, heartbeats and checkpoints commit without waiting for the WAL flush; a crash can make them be redone (repo.Config.AsyncProgressCommits)"
