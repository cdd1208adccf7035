// Command kfsdb-demo is kfsdb's demonstration, the README's main command
// (`make demo`): on a fresh database it applies every migration and runs a
// mixed workload of compilation attempts through real workers (successes,
// retries, failures, panics, exhausted attempts, a worker that dies holding
// a lease, cancels, supersedes and manual retries), then prints an outcome
// table, counters and latencies and checks the end state.
//
// --delivery picks how attempts reach the workers, as for `kfsdb-bench work`:
// postgres, the default, has each worker lease straight from the outbox
// (pgsource), with no relay and no broker; relay runs a real relay
// publishing to an in-process queue (memqueue) the workers receive from,
// and adds the scenarios only a broker has: dead letters (the publisher
// rejects an attempt until the relay gives up on it) and a broker outage.
//
// It lives beside the test harness because, without --database-url or
// $DATABASE_URL, it runs on a throwaway server that tests/pgtest starts
// (KFS_TEST_DATABASE_URL, else a container of KFS_TEST_POSTGRES_IMAGE); the
// deploy binary, cmd/kfsdb, carries no harness and runs no handler. Run `kfsdb-demo -h` for
// its flags.
package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/knowledgefs/kfsdb/cmd/kfsdb/cmdkit"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := Main(ctx, os.Args[1:], os.Stdout, os.Stderr, os.Getenv)
	stop()
	os.Exit(code)
}

// Main runs the demo with the command line args (without the program name)
// and returns the process exit code: 0 on success and for -h, 2 for usage
// errors, 1 for any other error. Errors go to stderr with passwords
// redacted.
func Main(ctx context.Context, args []string, stdout, stderr io.Writer, getenv func(string) string) int {
	return cmdkit.ExitCode("kfsdb-demo", cmdkit.Execute(ctx, newRootCommand(getenv), args, stdout, stderr), stderr, getenv)
}

// newRootCommand is the demo's one command: the command kit's root
// (cmdkit.NewRoot), with its persistent --database-url and
// --database-url-file, running Demo through cmdkit.RunCommand.
func newRootCommand(getenv func(string) string) *cobra.Command {
	opts := &DemoOpts{}
	root := cmdkit.NewRoot(&cmdkit.Root{
		Use:         "kfsdb-demo",
		Short:       "kfsdb's demonstration: a mixed workload of compilation attempts through real workers, on a fresh database",
		DatabaseURL: &opts.DatabaseURL,
		DatabaseURLUsage: "server to create the demo database on; defaults to --database-url-file, else $" + cmdkit.EnvDatabaseURL +
			", else a throwaway server (see pgtest: KFS_TEST_DATABASE_URL, KFS_TEST_POSTGRES_IMAGE)",
		Getenv: getenv,
		RunE: func(cmd *cobra.Command, _ []string) error {
			opts.Out = cmd.OutOrStdout()
			return cmdkit.RunCommand(cmd.Context(), opts, demoValidated)
		},
	})
	f := root.Flags()
	f.Var(&opts.Delivery, "delivery", "how attempts reach workers: postgres (workers lease straight from the outbox) or relay (relay → in-process queue → workers, with dead letters and a broker outage)")
	f.IntVar(&opts.Attempts, "attempts", DemoAttemptsDefault, fmt.Sprintf("compilation attempts to run (%d..%d)", minDemoAttempts, MaxDemoAttempts))
	f.Uint64Var(&opts.Seed, "seed", DemoSeedDefault, "shuffles which attempt follows which scenario")
	f.DurationVar(&opts.Timeout, "timeout", DemoTimeoutDefault, "fail if no attempt starts or changes state for this long before the workload settles")
	f.BoolVar(&opts.Keep, "keep", false, "keep the demo database (and a throwaway server) for kfsdb console; its URL goes to a file only you can read")
	f.BoolVar(&opts.Verbose, "verbose", false, "log the runtime's INFO records too (relay, sources, workers; default: WARN and above)")
	return root
}
