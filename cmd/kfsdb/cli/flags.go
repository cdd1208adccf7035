package cli

import (
	"flag"
	"fmt"
)

// parseCommand gives fs its usage line, parses args and requires exactly
// nargs positional arguments: every subcommand starts this way, and one
// place keeps their -h, flag errors and argument errors alike. wrong is the
// usage error's text when the count is off.
func parseCommand(fs *flag.FlagSet, args []string, usage string, nargs int, wrong string) error {
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), usage)
		fs.PrintDefaults()
	}
	if err := ParseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() != nargs {
		fs.Usage()
		return fmt.Errorf("%w: %s", ErrUsage, wrong)
	}
	return nil
}
