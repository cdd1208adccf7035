package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/pressly/goose/v3"
	"github.com/spf13/cobra"

	"github.com/knowledgefs/kfsdb/cmd/kfsdb/cmdkit"
	"github.com/knowledgefs/kfsdb/migrate"
)

// MigrateCommand is what `kfsdb migrate` does.
type MigrateCommand string

const (
	// MigrateDown rolls back the most recent migration (in the platform
	// modes never the seed, 0006, nor what comes before it); it refuses to
	// drop a table that holds rows unless MigrateOpts.AllowDataLoss.
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

// migrateShort is each MigrateCommand's line in `kfsdb migrate --help`.
var migrateShort = map[MigrateCommand]string{
	MigrateDown:    "roll back the most recent migration (in the platform modes never the seed nor what comes before it; a table that holds rows only with --allow-data-loss)",
	MigrateStatus:  "list every migration with when it was applied",
	MigrateUp:      "apply every pending migration",
	MigrateVersion: "print the database's current migration version",
}

// migrateNeedsOne is the usage error of a migrate command line that does
// not name exactly one subcommand.
const migrateNeedsOne = "migrate needs exactly one of up, down, status, version, sql"

// newMigrateCommand is `kfsdb migrate`: up, down, status and version run
// Migrate on --database-url with the persistent --lock-timeout, which may
// come before or after the subcommand; sql runs MigrateSQL.
func newMigrateCommand(r *runner) *cobra.Command {
	var lockTimeout time.Duration
	cmd := &cobra.Command{
		Use:   "migrate up|down|status|version|sql",
		Short: "apply, roll back one, list or show migrations, saying the mode (--lock-timeout D bounds each lock wait); print their SQL (migrate sql)",
		Long: "kfsdb records its versions in " + migrate.VersionTable + " and prints the mode it ran in: standalone, platform or platform-seeded.\n" +
			"migrate down refuses to drop a table that holds rows unless told --allow-data-loss.\n" +
			"migrate up and down write an audit line (stderr, --audit-file, --audit-syslog) with who, the versions, the result and --reason.\n" +
			"migrate sql --up [--from N] | --down --from N [--standalone] prints the migrations' SQL, for teams whose migrations another tool runs.",
		Args: cobra.ArbitraryArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return usageError(cmd, migrateNeedsOne)
		},
	}
	cmd.PersistentFlags().DurationVar(&lockTimeout, "lock-timeout", 0,
		"PostgreSQL lock_timeout of the migration session (e.g. 2s): a migration whose statement waits longer for a lock fails and is rolled back, "+
			"instead of queueing the application's queries on that table behind it; 0 keeps the server's setting")
	for _, command := range MigrateCommands() {
		var allowDataLoss bool
		var reason string
		sub := &cobra.Command{
			Use:   string(command),
			Short: migrateShort[command],
			Args:  exactArgs(0, migrateNeedsOne),
			RunE: func(cmd *cobra.Command, _ []string) error {
				opts := &MigrateOpts{Command: command, DatabaseURL: r.databaseURL, LockTimeout: lockTimeout, AllowDataLoss: allowDataLoss, Out: cmd.OutOrStdout(),
					Reason: reason, Audit: r.auditWriter()}
				return cmdkit.RunCommand(cmd.Context(), opts, Migrate)
			},
		}
		if command == MigrateUp || command == MigrateDown {
			sub.Flags().StringVar(&reason, "reason", "", "why you run it, recorded in the audit line")
		}
		if command == MigrateDown {
			sub.Flags().BoolVar(&allowDataLoss, "allow-data-loss", false,
				"drop a table that holds rows, with its rows (without it the down refuses, naming the table, and changes nothing)")
		}
		cmd.AddCommand(sub)
	}
	cmd.AddCommand(newMigrateSQLCommand())
	return cmd
}

// newMigrateSQLCommand is `kfsdb migrate sql`, which needs no database.
func newMigrateSQLCommand() *cobra.Command {
	const (
		wrong      = "migrate sql needs exactly one of --up, --down and no arguments"
		downFrom   = "migrate sql --down needs --from N: 6 on a platform database (kfsdb's own migrations); below 6 only with --standalone, for a database kfsdb's stand-ins created"
		standalone = "migrate sql --standalone goes with --down only"
	)
	var up, down bool
	opts := &MigrateSQLOpts{}
	cmd := &cobra.Command{
		Use:   "sql --up [--from N] | --down --from N [--standalone]",
		Short: "print the migrations' SQL, for teams whose migrations another tool runs",
		Long: "Prints the exact SQL of kfsdb's migrations, in order, to vendor into another tool's migrations; needs no database and records nothing.\n" +
			"--down needs --from; below 6 it drops the seed's tables (and below 4 the platform's) and needs --standalone. " +
			"Each DROP TABLE it prints locks the table and refuses (raises, dropping nothing) if the table holds rows.",
		Args: exactArgs(0, wrong),
		RunE: func(cmd *cobra.Command, _ []string) error {
			switch {
			case up == down:
				return usageError(cmd, wrong)
			case down && !cmd.Flags().Changed("from"):
				return usageError(cmd, downFrom)
			case up && opts.Standalone:
				return usageError(cmd, standalone)
			}
			opts.Direction, opts.Out = migrate.DirectionUp, cmd.OutOrStdout()
			if down {
				opts.Direction = migrate.DirectionDown
			}
			return MigrateSQL(opts)
		},
	}
	cmd.Flags().BoolVar(&up, "up", false, "the SQL that applies the migrations after --from, oldest first")
	cmd.Flags().BoolVar(&down, "down", false, "the SQL that rolls back the migrations after --from, newest first (needs --from)")
	cmd.Flags().Int64Var(&opts.From, "from", 0, "start after this version: 0 (all), 4 (the platform's tables exist, not the seed), 6 (the platform applied the seed); "+
		"--up defaults to 0, --down has no default")
	cmd.Flags().BoolVar(&opts.Standalone, "standalone", false, "with --down: allow --from below 6, printing the seed's Down and below 4 the stand-ins', "+
		"which drop the platform's tables; only for a database kfsdb's stand-ins created")
	return cmd
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
	// LockTimeout, when not zero, is PostgreSQL's lock_timeout for the
	// migration session: a statement that waits longer for a lock fails
	// and its migration's transaction is rolled back, instead of queueing
	// the application's reads and writes behind it for as long as the
	// blocking transaction lasts. Zero keeps the server's setting; else at
	// least 1ms.
	LockTimeout time.Duration
	// AllowDataLoss, for down only, lets the migration's Down drop a table
	// that holds rows (migrate.Provider.AllowDataLoss). Defaults to false:
	// the down refuses, naming the table, and changes nothing.
	AllowDataLoss bool
	// Reason is why the operator runs an up or a down, for its audit
	// line. Defaults to "": none given.
	Reason string
	// Audit receives the audit line (ops.AuditLine, msg=audit) of an up
	// or a down, applied, refused or failed. `kfsdb migrate` sends it to
	// stderr and the --audit-file or --audit-syslog. Defaults to nil:
	// none.
	Audit io.Writer
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
	if err := ValidateDatabaseURL(o.DatabaseURL); err != nil {
		return err
	}
	if o.Out == nil {
		return errors.New("invalid options: Out is required")
	}
	if o.LockTimeout < 0 || (o.LockTimeout > 0 && o.LockTimeout < time.Millisecond) {
		return fmt.Errorf("invalid options: LockTimeout must be zero or at least 1ms, got %s", o.LockTimeout)
	}
	if o.AllowDataLoss && o.Command != MigrateDown {
		return fmt.Errorf("invalid options: AllowDataLoss goes with Command down only, got %s", o.Command)
	}
	return nil
}

// Migrate runs opts.Command against opts.DatabaseURL with the migrate
// package's Provider: kfsdb's own version table (kfsdb_db_version) and
// advisory lock, in the mode the database calls for, which every command
// prints first ("mode: ..."). Runs hold the lock, so concurrent `up` runs
// serialize. Errors never contain the password.
func Migrate(ctx context.Context, opts *MigrateOpts) error {
	if err := opts.Validate(); err != nil {
		return err
	}
	return redacted(migrateDB(ctx, opts), opts.DatabaseURL)
}

func migrateDB(ctx context.Context, opts *MigrateOpts) (retErr error) {
	db, err := migrate.OpenSQLWithLockTimeout(ctx, opts.DatabaseURL, opts.LockTimeout)
	if err != nil {
		return err
	}
	p, err := migrate.NewProvider(db)
	if err != nil {
		_ = db.Close()
		return err
	}
	p.AllowDataLoss = opts.AllowDataLoss
	defer func() {
		if err := p.Close(); err != nil && retErr == nil {
			retErr = fmt.Errorf("could not close database: %w", err)
		}
	}()
	if opts.Command == MigrateUp || opts.Command == MigrateDown {
		return auditedMigration(ctx, db, p, opts)
	}
	return runMigrateCommand(ctx, p, opts.Command, opts.Out, opts.LockTimeout, nil)
}

// runMigrateCommand runs cmd on p, printing to out; an up or a down
// stores what it did in *ran when ran is not nil.
func runMigrateCommand(ctx context.Context, p *migrate.Provider, cmd MigrateCommand, out io.Writer, lockTimeout time.Duration, ran *migrateRun) error {
	if ran == nil {
		ran = &migrateRun{}
	}
	switch cmd {
	case MigrateUp:
		res, err := p.Up(ctx)
		ran.res = res
		if res.Mode != "" {
			printMode(out, res.Mode, true)
		}
		if res.Baseline {
			fmt.Fprintf(out, "BASELINE %05d: the seed, applied by the platform's runner and identical to it, recorded in %s without running it\n",
				migrate.SeedVersion, migrate.VersionTable)
		}
		printResults(out, res.Applied)
		if err != nil {
			return lockWaitError(res, "could not migrate up", lockTimeout, err)
		}
		if len(res.Applied) == 0 {
			fmt.Fprintln(out, "no migrations to apply")
		}
		fmt.Fprintf(out, "version: %d\n", res.Version)
		return nil
	case MigrateDown:
		res, err := p.Down(ctx)
		ran.res = res
		if res.Mode != "" {
			printMode(out, res.Mode, true)
		}
		printResults(out, res.Applied)
		var floor *migrate.FloorError
		switch {
		case errors.Is(err, goose.ErrNoNextVersion):
			ran.refused = "no migrations to roll back"
			fmt.Fprintln(out, ran.refused)
		case errors.As(err, &floor):
			ran.refused = "no migrations to roll back: " + floor.Error()
			fmt.Fprintln(out, ran.refused)
		case err != nil:
			return lockWaitError(res, "could not migrate down", lockTimeout, err)
		}
		fmt.Fprintf(out, "version: %d\n", res.Version)
		return nil
	case MigrateStatus:
		return printStatus(ctx, p, out)
	case MigrateVersion:
		st, err := p.Status(ctx)
		if err != nil {
			return fmt.Errorf("could not read the migration state: %w", err)
		}
		printMode(out, st.Mode, st.Recorded)
		fmt.Fprintf(out, "version: %d\n", st.Version)
		return nil
	}
	return fmt.Errorf("unknown migrate command %q", cmd)
}

// printMode prints the mode line every migrate command starts with.
func printMode(out io.Writer, mode migrate.Mode, recorded bool) {
	if recorded {
		fmt.Fprintf(out, "mode: %s (%s)\n", mode, mode.Describe())
		return
	}
	fmt.Fprintf(out, "mode: %s, not recorded yet: the next up detects it again (%s)\n", mode, mode.Describe())
}

// lockWaitError wraps err, a failed migration, with what before says. When
// the migration gave up a lock wait, at lockTimeout (SQLSTATE 55P03) or as
// a deadlock's victim (40P01), it says so and names the version the
// database stayed at: goose runs each migration in its own transaction, so
// the one that failed changed nothing and can be retried.
func lockWaitError(res *migrate.Result, before string, lockTimeout time.Duration, err error) error {
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || (pgErr.Code != pgLockNotAvailable && pgErr.Code != pgDeadlockDetected) {
		return fmt.Errorf("%s: %w", before, err)
	}
	stayed := fmt.Sprint(res.Version)
	if pgErr.Code == pgDeadlockDetected {
		return fmt.Errorf("%s: the migration deadlocked with another session (typically the application writing a table that references one the migration alters) and was rolled back; the database stays at version %s; retry, with those writes paused: %w",
			before, stayed, err)
	}
	limit := "the server's lock_timeout"
	if lockTimeout > 0 {
		limit = "the lock timeout of " + lockTimeout.String()
	}
	return fmt.Errorf("%s: a lock was not granted within %s: another session holds a conflicting lock on a table the migration alters; its transaction was rolled back and the database stays at version %s; retry when the blocking transaction has ended (pg_stat_activity, pg_locks): %w",
		before, limit, stayed, err)
}

// SQLSTATEs of the lock waits a migration gives up: lock_timeout expired,
// and chosen as a deadlock's victim.
const (
	pgLockNotAvailable = "55P03"
	pgDeadlockDetected = "40P01"
)

// printResults prints one line per result, as goose's CLI does.
func printResults(out io.Writer, res []*goose.MigrationResult) {
	for _, r := range res {
		fmt.Fprintln(out, r.String())
	}
}

func printStatus(ctx context.Context, p *migrate.Provider, out io.Writer) error {
	st, err := p.Status(ctx)
	if err != nil {
		return statusError(out, err)
	}
	printMode(out, st.Mode, st.Recorded)
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "VERSION\tSTATE\tAPPLIED AT\tMIGRATION")
	for _, m := range st.Migrations {
		applied := "-"
		if !m.AppliedAt.IsZero() {
			applied = m.AppliedAt.Format(time.RFC3339)
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\n", m.Version, m.State, applied, m.Name)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintf(out, "version: %d\n", st.Version)
	return nil
}

// MigrateSQLOpts are the options of MigrateSQL.
type MigrateSQLOpts struct {
	// Direction is up (apply) or down (roll back). Required.
	Direction migrate.Direction
	// From is the version the SQL starts after: 0 for every migration, 4
	// for the platform's tables without the seed, 6 for a platform that
	// applied the seed. Defaults to 0; a down from below 6 needs
	// Standalone.
	From int64
	// Standalone allows a down from below 6: the seed's Down, and below 4
	// the stand-ins', which drop the platform's tables
	// (migrate.SQLOptions.Standalone). Defaults to false.
	Standalone bool
	// Out receives the SQL. Required.
	Out io.Writer
}

// MigrateSQL prints the exact SQL of the migrations after opts.From, in
// the order they run (migrate.SQL), for a team whose migrations another
// tool runs; a down's DROP TABLEs are guarded. It needs no database. A
// down from below 6 without opts.Standalone is refused (a usage error
// wrapping *migrate.DownBelowSeedError).
func MigrateSQL(opts *MigrateSQLOpts) error {
	if opts.Out == nil {
		return errors.New("invalid options: Out is required")
	}
	text, err := migrate.SQL(opts.Direction, opts.From, migrate.SQLOptions{Standalone: opts.Standalone})
	if err != nil {
		return fmt.Errorf("%w: %w", ErrUsage, err)
	}
	_, err = io.WriteString(opts.Out, text)
	return err
}
