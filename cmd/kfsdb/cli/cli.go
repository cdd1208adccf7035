// Package cli implements the kfsdb command, the binary operators deploy
// against a production database: one cobra command tree (kfsdb --help,
// kfsdb completion) whose persistent --database-url (else
// --database-url-file, else $DATABASE_URL) every command reads, and whose
// changes each write an audit line (stderr, and --audit-file or
// --audit-syslog), and one function per command (Migrate, Purge, the
// attempts/outbox/stuck commands, Console) that takes an options struct
// with a Validate method and writes its output to an injected io.Writer, so
// tests can call the commands directly. Parsing reads no database: a
// command validates its options, then withPool opens the one pool it runs
// on (migrate: goose's database/sql handle). No command runs a handler or a
// relay: attempts change only through the guarded transitions an operator
// asks for. What runs a stand-in handler or publishes the outbox for a demo
// or a bench (work, relay, bench) is kfsdb-bench (module
// bench/kfsdb-bench), which reuses Migrate; the demo is
// tests/cmd/kfsdb-demo (`make demo`). The root, its persistent
// --database-url, exit codes, pool opening and output helpers are the
// command kit's (cmdkit), which kfsdb-bench and the demo use too.
package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/spf13/cobra"

	"github.com/knowledgefs/kfsdb/cmd/kfsdb/cmdkit"
)

// rootLong is `kfsdb --help`'s text above the commands; the actions are
// ops' table's.
var rootLong = `kfsdb is the binary operators deploy against a production database: it
migrates kfsdb's schema, inspects attempts and the outbox, and acts on
attempts only through the guarded transitions (` + strings.Join(actionNames(), ", ") + `,
purge), and sets tenants' limits (caps, rates, pauses).
It runs no handler and publishes nothing.

work, relay and bench moved to kfsdb-bench (bench/kfsdb-bench in a kfsdb
checkout): they run a stand-in handler, or publish the outbox, for demos
and benchmarks, and have no place on a production database. The demo is
'make demo' in a kfsdb checkout.`

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
// with passwords redacted, and returns the process exit code
// (cmdkit.ExitCode): 0 for nil, 2 for usage errors (ErrUsage,
// repo.ErrInvalidInput, a secret file others may read, and an audit file
// others may read, ErrAuditFileMode), 1 for any other error.
func ExitCode(name string, err error, stderr io.Writer, getenv func(string) string) int {
	return cmdkit.ExitCode(name, err, stderr, getenv, ErrAuditFileMode)
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
	r := &runner{getenv: getenv, stdin: stdin}
	err := cmdkit.Execute(ctx, newRootCommand(r), args, cmdkit.TermSafe(stdout), cmdkit.TermSafe(stderr))
	if r.audit != nil {
		err = errors.Join(err, r.audit.close())
	}
	return err
}

// newRootCommand builds the kfsdb command tree on r: the kit's root
// (cmdkit.NewRoot), whose pre-run also opens the audit sink.
func newRootCommand(r *runner) *cobra.Command {
	root := cmdkit.NewRoot(&cmdkit.Root{
		Use:         "kfsdb",
		Short:       "kfsdb's schema, attempts and outbox, for operators on a production database",
		Long:        rootLong,
		DatabaseURL: &r.databaseURL,
		DatabaseURLUsage: "PostgreSQL URL; defaults to --database-url-file, else $" + EnvDatabaseURL +
			". A password here is visible to every local user (ps): kfsdb warns",
		Getenv: r.getenv,
		PreRun: func(cmd *cobra.Command) error {
			var err error
			r.audit, err = openAuditSink(r.auditFlags, cmd.ErrOrStderr(), r.getenv)
			return err
		},
	})
	root.PersistentFlags().StringVar(&r.auditFlags.file, "audit-file", "",
		"also append every audit line (one per change: purge, migrate up/down, attempts "+strings.Join(actionNames(), "/")+", tenant "+strings.Join(tenantChangeNames(), "/")+") to this file, created 0600; defaults to $"+EnvAuditFile)
	root.PersistentFlags().BoolVar(&r.auditFlags.syslog, "audit-syslog", false,
		"also send every audit line to the local syslog (authpriv); defaults to $"+EnvAuditSyslog)
	root.AddCommand(newMigrateCommand(r), newPurgeCommand(r), newAttemptsCommand(r), newOutboxCommand(r), newStuckCommand(r), newTenantCommand(r), newConsoleCommand(r))
	for name, why := range movedToBench {
		root.AddCommand(movedCommand(name, fmt.Sprintf("%s is not part of the deploy binary (%s): run `kfsdb-bench %s` (go build ./bench/kfsdb-bench in a kfsdb checkout)",
			name, why, name)))
	}
	root.AddCommand(movedCommand("demo", "demo needs a throwaway server and is not part of the kfsdb binary: run `make demo` in a kfsdb checkout"))
	return root
}

// movedCommand is a command that left the binary: whatever follows it,
// flags and -h included, it answers with a usage error saying where it
// went. It is hidden from the help.
func movedCommand(name, where string) *cobra.Command {
	return &cobra.Command{
		Use:                name,
		Hidden:             true,
		DisableFlagParsing: true,
		RunE: func(*cobra.Command, []string) error {
			return fmt.Errorf("%w: %s", ErrUsage, where)
		},
	}
}
