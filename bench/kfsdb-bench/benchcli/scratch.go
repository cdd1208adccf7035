package benchcli

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/knowledgefs/kfsdb/cmd/kfsdb/cli"
	"github.com/knowledgefs/kfsdb/tests/scratch"
)

// ScratchServer is a server WithScratchDatabase creates its database on: a
// *scratch.Server (`kfsdb-bench bench`), or the test harness's *pgtest.Server,
// which may be a throwaway container (the demo).
type ScratchServer interface {
	// CreateDatabase creates database name (template "": an empty one)
	// and returns its URL.
	CreateDatabase(ctx context.Context, name, template string) (string, error)
	// Description names the server without credentials.
	Description() string
	// DropDatabase drops database name, terminating its sessions.
	DropDatabase(ctx context.Context, name string) error
}

// scratchDropTimeout bounds dropping the scratch database, which runs even
// when ctx was canceled.
const scratchDropTimeout = 30 * time.Second

// WithScratchDatabase runs fn on a fresh database named prefix_<random> on
// srv, after `kfsdb migrate up` applied every migration to it, and then
// drops the database, also when ctx was canceled. It prints each step to
// out: the server's description, "== created database NAME", the
// migrations, "== dropped database NAME".
func WithScratchDatabase(ctx context.Context, srv ScratchServer, prefix string, out io.Writer, fn func(url string) error) error {
	return withScratchDatabase(ctx, srv, prefix, out, false, fn)
}

// WithKeptScratchDatabase is WithScratchDatabase that keeps the database
// when fn succeeds ("== kept database NAME"), for a person to look at.
func WithKeptScratchDatabase(ctx context.Context, srv ScratchServer, prefix string, out io.Writer, fn func(url string) error) error {
	return withScratchDatabase(ctx, srv, prefix, out, true, fn)
}

func withScratchDatabase(ctx context.Context, srv ScratchServer, prefix string, out io.Writer, keep bool, fn func(url string) error) (retErr error) {
	fmt.Fprintf(out, "server: %s\n", srv.Description())
	name := scratch.RandomName(prefix)
	url, err := srv.CreateDatabase(ctx, name, "")
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "== created database %s\n", name)
	defer func() {
		if keep && retErr == nil {
			fmt.Fprintf(out, "== kept database %s\n", name)
			return
		}
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), scratchDropTimeout)
		defer cancel()
		if err := srv.DropDatabase(dctx, name); err != nil {
			if retErr == nil {
				retErr = err
			}
			return
		}
		fmt.Fprintf(out, "== dropped database %s\n", name)
	}()

	fmt.Fprintln(out, "== kfsdb migrate up")
	if err := cli.Migrate(ctx, &cli.MigrateOpts{Command: cli.MigrateUp, DatabaseURL: url, Out: out}); err != nil {
		return err
	}
	return fn(url)
}
