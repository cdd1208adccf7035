package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/pressly/goose/v3"

	"github.com/knowledgefs/kfsdb/cmd/kfsdb/migrate"
	"github.com/knowledgefs/kfsdb/cmd/kfsdb/redact"
)

// MigrateCommand is what `kfsdb migrate` does.
type MigrateCommand string

const (
	// MigrateDown rolls back the most recent migration.
	MigrateDown MigrateCommand = "down"
	// MigrateStatus lists every migration with when it was applied.
	MigrateStatus MigrateCommand = "status"
	// MigrateUp applies every pending migration.
	MigrateUp MigrateCommand = "up"
	// MigrateVersion prints the database's current migration version.
	MigrateVersion MigrateCommand = "version"
)

// MigrateCommands returns every MigrateCommand.
func MigrateCommands() []MigrateCommand {
	return []MigrateCommand{MigrateUp, MigrateDown, MigrateStatus, MigrateVersion}
}

// MigrateOpts are the options of Migrate.
type MigrateOpts struct {
	// Command is the migrate subcommand to run. Required.
	Command MigrateCommand
	// DatabaseURL is the database to migrate. Required; the command line
	// defaults it to $DATABASE_URL.
	DatabaseURL string
	// Out receives the command's output. Required.
	Out io.Writer
}

// Validate reports the first missing or invalid field.
func (o *MigrateOpts) Validate() error {
	if o.Command == "" {
		return errors.New("invalid options: Command is required (up, down, status or version)")
	}
	valid := false
	for _, c := range MigrateCommands() {
		valid = valid || c == o.Command
	}
	if !valid {
		return fmt.Errorf("invalid options: Command %q is not one of up, down, status, version", o.Command)
	}
	if o.DatabaseURL == "" {
		return fmt.Errorf("invalid options: DatabaseURL is required: pass --database-url or set $%s", EnvDatabaseURL)
	}
	if _, err := pgconn.ParseConfig(o.DatabaseURL); err != nil {
		return fmt.Errorf("invalid options: DatabaseURL is not a valid PostgreSQL URL: %s", redact.Text(err.Error(), o.DatabaseURL))
	}
	if o.Out == nil {
		return errors.New("invalid options: Out is required")
	}
	return nil
}

// Migrate runs opts.Command against opts.DatabaseURL with goose's Provider
// over the embedded migrations. Runs hold PostgreSQL's session lock, so
// concurrent `up` runs serialize. Errors never contain the password.
func Migrate(ctx context.Context, opts *MigrateOpts) error {
	if err := opts.Validate(); err != nil {
		return err
	}
	if err := migrateDB(ctx, opts); err != nil {
		return errors.New(redact.Text(err.Error(), opts.DatabaseURL))
	}
	return nil
}

func migrateDB(ctx context.Context, opts *MigrateOpts) (retErr error) {
	db, err := migrate.OpenSQL(ctx, opts.DatabaseURL)
	if err != nil {
		return err
	}
	p, err := migrate.NewProvider(db)
	if err != nil {
		_ = db.Close()
		return err
	}
	defer func() {
		if err := p.Close(); err != nil && retErr == nil {
			retErr = fmt.Errorf("could not close database: %w", err)
		}
	}()
	return runMigrateCommand(ctx, p, opts.Command, opts.Out)
}

func runMigrateCommand(ctx context.Context, p *goose.Provider, cmd MigrateCommand, out io.Writer) error {
	switch cmd {
	case MigrateUp:
		res, err := p.Up(ctx)
		printResults(out, res)
		if err != nil {
			return fmt.Errorf("could not migrate up: %w", err)
		}
		if len(res) == 0 {
			fmt.Fprintln(out, "no migrations to apply")
		}
		return printVersion(ctx, p, out)
	case MigrateDown:
		res, err := p.Down(ctx)
		if res != nil {
			printResults(out, []*goose.MigrationResult{res})
		}
		if err != nil {
			if errors.Is(err, goose.ErrNoNextVersion) {
				fmt.Fprintln(out, "no migrations to roll back")
				return nil
			}
			return fmt.Errorf("could not migrate down: %w", err)
		}
		return printVersion(ctx, p, out)
	case MigrateStatus:
		return printStatus(ctx, p, out)
	case MigrateVersion:
		return printVersion(ctx, p, out)
	}
	return fmt.Errorf("unknown migrate command %q", cmd)
}

// printResults prints one line per result, as goose's CLI does.
func printResults(out io.Writer, res []*goose.MigrationResult) {
	for _, r := range res {
		fmt.Fprintln(out, r.String())
	}
}

func printStatus(ctx context.Context, p *goose.Provider, out io.Writer) error {
	st, err := p.Status(ctx)
	if err != nil {
		return fmt.Errorf("could not read migration status: %w", err)
	}
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "VERSION\tSTATE\tAPPLIED AT\tMIGRATION")
	for _, s := range st {
		applied := "-"
		if s.State == goose.StateApplied {
			applied = s.AppliedAt.UTC().Format(time.RFC3339)
		}
		name := s.Source.Path
		if i := strings.LastIndex(name, "/"); i >= 0 {
			name = name[i+1:]
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\n", s.Source.Version, s.State, applied, name)
	}
	return tw.Flush()
}

func printVersion(ctx context.Context, p *goose.Provider, out io.Writer) error {
	v, err := p.GetDBVersion(ctx)
	if err != nil {
		return fmt.Errorf("could not read database version: %w", err)
	}
	fmt.Fprintf(out, "version: %d\n", v)
	return nil
}
