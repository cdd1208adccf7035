// Package benchcli implements kfsdb-bench, the bench and demo binary:
// work (workers with a stand-in handler on a database's attempts), relay
// (the outbox published to stdout or NATS) and bench (the lifecycle load
// driver on a scratch database). Each command is one function taking an
// options struct with a Validate method, writing to an injected io.Writer,
// so tests call the commands directly. They run a stand-in handler or a
// relay that is no application's, so they left the deploy binary
// (cmd/kfsdb), whose migrate they reuse; the command tree is built with
// the deploy binary's command kit (cmdkit): its root with the persistent
// --database-url and --database-url-file, RunCommand, exit codes, pool
// opening with metrics, and logging. WithScratchDatabase gives the demo
// (tests/cmd/kfsdb-demo) its migrated scratch database too.
package benchcli

import (
	"context"
	"io"

	"github.com/spf13/cobra"

	"github.com/knowledgefs/kfsdb/cmd/kfsdb/cmdkit"
)

// rootLong is `kfsdb-bench --help`'s text above the commands.
const rootLong = `kfsdb-bench runs kfsdb's stand-in handler, relay and load driver for demos
and benchmarks. Never point work or relay at a production database: work
completes (or fails) the attempts it finds with nothing compiled, and relay
marks outbox rows dispatched to stdout or to a NATS stream of natsjs's
defaults. Operators' commands are in the deploy binary, kfsdb.

A bench on a server of its own needs the test harness: run
'make bench-kfsdb' in a kfsdb checkout.`

// Main runs the command line args and returns the process exit code
// (cmdkit.ExitCode: 0, 1, or 2 for usage errors).
func Main(ctx context.Context, args []string, stdout, stderr io.Writer, getenv func(string) string) int {
	return cmdkit.ExitCode("kfsdb-bench", Run(ctx, args, stdout, stderr, getenv), stderr, getenv)
}

// Run parses args (without the program name) and runs the command. getenv
// supplies DATABASE_URL.
func Run(ctx context.Context, args []string, stdout, stderr io.Writer, getenv func(string) string) error {
	return cmdkit.Execute(ctx, newRootCommand(getenv), args, stdout, stderr)
}

// newRootCommand builds the kfsdb-bench command tree: the kit's root
// (cmdkit.NewRoot) with work, relay and bench, which read the database URL
// it resolves.
func newRootCommand(getenv func(string) string) *cobra.Command {
	var databaseURL string
	root := cmdkit.NewRoot(&cmdkit.Root{
		Use:         "kfsdb-bench",
		Short:       "kfsdb's stand-in handler, relay and load driver, for demos and benchmarks",
		Long:        rootLong,
		DatabaseURL: &databaseURL,
		DatabaseURLUsage: "PostgreSQL URL (bench: the server to create the bench database on); defaults to --database-url-file, else $" +
			cmdkit.EnvDatabaseURL + ". A password here is visible to every local user (ps): kfsdb-bench warns",
		Getenv: getenv,
	})
	root.AddCommand(newWorkCommand(&databaseURL), newRelayCommand(&databaseURL), newBenchCommand(&databaseURL))
	return root
}

// natsURLUsage is the --nats-url flag's help text.
const natsURLUsage = "NATS server, e.g. nats://127.0.0.1:4222 (comma-separated for a cluster); the JetStream stream and consumer are created if missing"

const asyncProgressUsage = "claims, marks, leases, heartbeats and checkpoints commit without waiting for the WAL flush; a crash can make them be redone (repo.Config.AsyncProgressCommits)"
