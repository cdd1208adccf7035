package cli

import (
	"errors"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/knowledgefs/kfsdb/migrate"
)

// statusError is what `kfsdb migrate status` reports when the status
// cannot be read. On a database whose kfsdb migrations another tool
// applied (a *migrate.UnrecordedError: kfsdb's tables, no kfsdb version
// history) it prints what it found, one migration a line, and returns the
// error, shortened to what to do.
func statusError(out io.Writer, err error) error {
	var unrecorded *migrate.UnrecordedError
	if !errors.As(err, &unrecorded) {
		return fmt.Errorf("could not read migration status: %w", err)
	}
	fmt.Fprintf(out, "mode: none recorded (%s): kfsdb's migrations were applied by another tool, likely `kfsdb migrate sql --up` with psql\n",
		unrecorded.History())
	fmt.Fprintln(out, "found the objects of:")
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "VERSION\tMIGRATION\tOBJECTS")
	for _, f := range unrecorded.Found {
		fmt.Fprintf(tw, "%d\t%s\t%s\n", f.Version, f.Name, strings.Join(f.Objects, ", "))
	}
	if ferr := tw.Flush(); ferr != nil {
		return ferr
	}
	return &listedError{msg: "no migration status: kfsdb's migrations here (found up to version " + fmt.Sprint(unrecorded.Latest()) +
		", listed above) were applied by another tool. " + unrecorded.Advice(), err: err}
}

// listedError is err with a shorter message, for when what err says in
// full was printed already.
type listedError struct {
	msg string
	err error
}

func (e *listedError) Error() string { return e.msg }
func (e *listedError) Unwrap() error { return e.err }
