package cmdkit

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// Root says how NewRoot builds a binary's root command.
type Root struct {
	// DatabaseURL receives --database-url and, once the root's pre-run
	// has resolved it, the URL every command uses: --database-url, else
	// --database-url-file's first line, else $DATABASE_URL, else "".
	// Required.
	DatabaseURL *string
	// DatabaseURLUsage is --database-url's help. Defaults to the deploy
	// binary's: a PostgreSQL URL, and where else it comes from.
	DatabaseURLUsage string
	// Getenv supplies $DATABASE_URL. Defaults to nil: an empty environment.
	Getenv func(string) string
	// Long is the root's help above its usage (cobra's). Defaults to "".
	Long string
	// PreRun, when not nil, runs after the database URL is resolved and
	// before any command (kfsdb opens its audit sink there).
	PreRun func(cmd *cobra.Command) error
	// RunE, when not nil, is the root's own command (the demo is one
	// command); it takes no positional arguments. Defaults to nil: the
	// root only holds commands, and answers an empty or unknown command
	// line with its help and a usage error.
	RunE func(cmd *cobra.Command, args []string) error
	// Short is the root's one-line help (cobra's). Defaults to "".
	Short string
	// Use is the binary's name, as cobra's Use: errors and warnings start
	// with it. Required.
	Use string
}

// databaseURLUsageDefault is --database-url's help by default.
const databaseURLUsageDefault = "PostgreSQL URL; defaults to --database-url-file, else $" + EnvDatabaseURL +
	". A password here is visible to every local user (ps): a warning says so"

// NewRoot builds a binary's root command as r says, with what every
// binary's root shares: the persistent --database-url and
// --database-url-file, resolved into *r.DatabaseURL before any command
// runs (a password on the command line is warned about; both flags at once
// are a usage error); errors left to ExitCode, reported once, and usage
// printed with usage errors only; a bad flag printing the usage and
// returning a usage error (a single-dash long flag, -workers, is told to
// take two dashes).
func NewRoot(r *Root) *cobra.Command {
	urlFlags := &databaseURLFlags{url: r.DatabaseURL}
	root := &cobra.Command{
		Use:   r.Use,
		Short: r.Short,
		Long:  r.Long,
		PersistentPreRunE: func(cmd *cobra.Command, _ []string) error {
			if err := urlFlags.resolve(r.Use, cmd.ErrOrStderr(), r.Getenv); err != nil {
				return err
			}
			if r.PreRun != nil {
				return r.PreRun(cmd)
			}
			return nil
		},
		// ExitCode reports errors, once, and usage goes with usage errors
		// only.
		SilenceErrors: true,
		SilenceUsage:  true,
	}
	if r.RunE != nil {
		root.Args, root.RunE = NoArgs, r.RunE
	} else {
		// Not cobra's "unknown command" (exit 1): RunE answers with a
		// usage error, and an empty command line too.
		root.Args = cobra.ArbitraryArgs
		root.RunE = func(cmd *cobra.Command, args []string) error {
			fmt.Fprintf(cmd.ErrOrStderr(), "%s\n\n%s", cmd.Long, cmd.UsageString())
			if len(args) == 0 {
				return fmt.Errorf("%w: no command", ErrUsage)
			}
			return fmt.Errorf("%w: unknown command %q", ErrUsage, args[0])
		}
	}
	root.PersistentFlags().StringVar(r.DatabaseURL, "database-url", "", cmp.Or(r.DatabaseURLUsage, databaseURLUsageDefault))
	root.PersistentFlags().StringVar(&urlFlags.file, "database-url-file", "",
		"read the PostgreSQL URL from the first line of this file, which must be readable by its owner only (0600)")
	root.SetFlagErrorFunc(func(cmd *cobra.Command, err error) error {
		fmt.Fprint(cmd.ErrOrStderr(), cmd.UsageString())
		return fmt.Errorf("%w: %w%s", ErrUsage, err, twoDashesHint(cmd, err))
	})
	return root
}

// twoDashesHint is what a bad flag's error adds when the flag is a long
// one given with one dash, as Go's flag package took them (-workers):
// pflag reads it as the shorthands w, o, r… and refuses the first.
func twoDashesHint(cmd *cobra.Command, err error) string {
	var notExist *pflag.NotExistError
	if !errors.As(err, &notExist) {
		return ""
	}
	name, _, _ := strings.Cut(notExist.GetSpecifiedShortnames(), "=")
	if len(name) < 2 || cmd.Flags().Lookup(name) == nil {
		return ""
	}
	return fmt.Sprintf(" (long flags take two dashes: --%s)", name)
}

// Execute runs root on args (without the program name) with its output
// and errors on stdout and stderr, and returns the command's error.
func Execute(ctx context.Context, root *cobra.Command, args []string, stdout, stderr io.Writer) error {
	root.SetOut(stdout)
	root.SetErr(stderr)
	// Not nil: cobra would read os.Args instead.
	root.SetArgs(append([]string{}, args...))
	_, err := root.ExecuteContextC(ctx)
	return err
}
