package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/knowledgefs/kfsdb/tests/pgtest"
)

// DemoOpts are the options of Demo.
type DemoOpts struct {
	// DatabaseURL is the server to create the demo database on, connected to
	// any database the user may run CREATE DATABASE from. Optional: when
	// empty, Demo acquires a throwaway server like the tests do
	// (KFS_TEST_DATABASE_URL, else a container of KFS_TEST_POSTGRES_IMAGE).
	// The command line defaults it to $DATABASE_URL.
	DatabaseURL string
	// Out receives the command's output. Required.
	Out io.Writer
}

// Validate reports the first missing or invalid field.
func (o *DemoOpts) Validate() error {
	if o.DatabaseURL != "" {
		if _, err := pgconn.ParseConfig(o.DatabaseURL); err != nil {
			return fmt.Errorf("DatabaseURL is not a valid PostgreSQL URL: %s", redactWith(err.Error(), o.DatabaseURL))
		}
	}
	if o.Out == nil {
		return errors.New("Out is required")
	}
	return nil
}

// Demo creates a fresh database kfsdb_demo_<random>, applies every
// migration, prints `migrate status`, and then drops the database (and stops
// the throwaway server, if it started one), also when ctx is canceled.
func Demo(ctx context.Context, opts *DemoOpts) error {
	if err := opts.Validate(); err != nil {
		return err
	}
	if err := demo(ctx, opts); err != nil {
		return errors.New(redactWith(err.Error(), opts.DatabaseURL))
	}
	return nil
}

func demo(ctx context.Context, opts *DemoOpts) (retErr error) {
	out := opts.Out
	var (
		srv *pgtest.Server
		err error
	)
	if opts.DatabaseURL != "" {
		fmt.Fprintf(out, "== using server %s\n", pgtest.RedactURL(opts.DatabaseURL))
		srv, err = pgtest.ConnectServer(ctx, opts.DatabaseURL)
	} else {
		fmt.Fprintln(out, "== starting a throwaway PostgreSQL server (no --database-url or $DATABASE_URL)")
		srv, err = pgtest.StartServer(ctx)
	}
	if err != nil {
		return err
	}
	defer func() {
		if err := srv.Close(); err != nil && retErr == nil {
			retErr = err
		}
	}()
	fmt.Fprintf(out, "server: %s\n", srv.Description())

	name := pgtest.RandomName("kfsdb_demo")
	url, err := srv.CreateDatabase(ctx, name, "")
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "== created database %s\n", name)
	defer func() {
		// Drop even when ctx was canceled (Ctrl-C).
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
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
	if err := Migrate(ctx, &MigrateOpts{Command: MigrateUp, DatabaseURL: url, Out: out}); err != nil {
		return err
	}
	fmt.Fprintln(out, "== kfsdb migrate status")
	return Migrate(ctx, &MigrateOpts{Command: MigrateStatus, DatabaseURL: url, Out: out})
}
