// Package cmdkit is the command kit of kfsdb's binaries: the deploy
// binary kfsdb (cmd/kfsdb/cli), the bench binary kfsdb-bench (module
// bench/kfsdb-bench) and the demo (tests/cmd/kfsdb-demo) build their cobra
// command trees with it, so that they read their flags, report their errors
// and open their pools alike:
//
//   - NewRoot builds a binary's root command with the persistent
//     --database-url and --database-url-file (else $DATABASE_URL), resolved
//     before any command runs; Execute runs it on a command line;
//   - RunCommand runs every command with options: it validates them
//     (a usage error, exit status 2) and only then runs it;
//   - ExitCode turns a command's error into one redacted line on stderr and
//     the process exit code (ErrUsage and its kin: 2);
//   - OpenServedPool and WithPool open the one pool a command runs on, with
//     its Prometheus metrics served beside it (--metrics-listen);
//   - TermSafe, PrintRow, WriteJSON, NewSyncWriter and NewLogger are the
//     output helpers.
//
// It lives in the deploy binary's module so that importers of the library
// (the root module) never get cobra; kfsdb-bench's module and the tests
// module, never released, require this one.
package cmdkit

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"

	"github.com/spf13/cobra"

	"github.com/knowledgefs/kfsdb/cmd/kfsdb/escape"
	"github.com/knowledgefs/kfsdb/cmd/kfsdb/httpguard"
	"github.com/knowledgefs/kfsdb/migrate/redact"
	"github.com/knowledgefs/kfsdb/repo"
)

// ErrUsage is returned for bad command lines (unknown command, missing
// argument, invalid flag value, options a command's Validate refuses);
// ExitCode turns it into exit status 2.
var ErrUsage = errors.New("usage error")

// Opts are a command's options: Validate reports the first missing or
// invalid field.
type Opts interface {
	Validate() error
}

// RunCommand is how every command with options runs, in kfsdb (attempts
// show and the actions, console, migrate, purge, the tenant changes),
// kfsdb-bench and the demo: it validates opts, once, and returns their
// refusal as a usage error (exit status 2) without running anything; else
// it runs run on them. run is the command's exported twin (Migrate, Work,
// Bench, ...), which validates again for callers that skip the command
// line. A command whose only input is a flag or two (outbox stats, stuck,
// attempts list) checks them in its RunE.
func RunCommand[O Opts](ctx context.Context, opts O, run func(context.Context, O) error) error {
	if err := opts.Validate(); err != nil {
		return fmt.Errorf("%w: %w", ErrUsage, err)
	}
	return run(ctx, opts)
}

// ExitCode reports err, a command's result, on stderr as "name: message"
// with passwords redacted (also $DATABASE_URL's, wherever it appears), and
// name said once (repo's errors already start with "kfsdb: "). It returns
// the process exit code: 0 for nil and for flag.ErrHelp, 2 for usage
// errors (ErrUsage; repo.ErrInvalidInput, a value from the command line
// that repo's validation refused, such as a --tenant longer than 255
// characters; a secret file that others may read, ErrSecretFileMode and
// httpguard.ErrTokenFileMode, the operator's to fix; and any of
// usageErrs, the binary's own), 1 for any other error.
func ExitCode(name string, err error, stderr io.Writer, getenv func(string) string, usageErrs ...error) int {
	if err == nil || errors.Is(err, flag.ErrHelp) {
		return 0
	}
	msg := strings.TrimPrefix(err.Error(), name+": ")
	fmt.Fprintf(stderr, "%s: %s\n", name, escape.Field(redact.Text(msg, envDatabaseURL(getenv))))
	for _, usage := range append([]error{ErrUsage, repo.ErrInvalidInput, ErrSecretFileMode, httpguard.ErrTokenFileMode}, usageErrs...) {
		if errors.Is(err, usage) {
			return 2
		}
	}
	return 1
}

// ExactArgs is a command's Args: n positional arguments, else its usage
// and wrong as a usage error.
func ExactArgs(n int, wrong string) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		if len(args) != n {
			return UsageError(cmd, wrong)
		}
		return nil
	}
}

// NoArgs is the Args of a command that takes no positional argument: any
// is its usage and "NAME takes no arguments" as a usage error.
func NoArgs(cmd *cobra.Command, args []string) error {
	return ExactArgs(0, cmd.Name()+" takes no arguments")(cmd, args)
}

// UsageError prints cmd's usage on its stderr and returns msg as a usage
// error (exit 2), as a bad flag does.
func UsageError(cmd *cobra.Command, msg string) error {
	fmt.Fprint(cmd.ErrOrStderr(), cmd.UsageString())
	return fmt.Errorf("%w: %s", ErrUsage, msg)
}
