package migrate

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io/fs"
	"math"
	"testing/fstest"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/pressly/goose/v3"
	"github.com/pressly/goose/v3/database"
	"github.com/pressly/goose/v3/lock"

	"github.com/knowledgefs/kfsdb/db/migrations"
	"github.com/knowledgefs/kfsdb/repo"
)

const (
	// VersionTable is the goose version table kfsdb records its migrations
	// in: its own, never goose's default goose_db_version, so that an
	// application's goose history (whose version numbers overlap kfsdb's)
	// can neither hide kfsdb's migrations nor be changed by them.
	VersionTable = "kfsdb_db_version"
	// ModeTable holds one row: the [Mode] kfsdb's migrations were
	// installed in, recorded by the first run that changed the database.
	ModeTable = "kfsdb_db_mode"
	// LockID is the PostgreSQL session advisory lock (the single 64-bit
	// key form) every run holds: "kfsdmigr" in ASCII. goose's default key
	// (4097083626) is left to the application's own goose runs, so kfsdb
	// neither waits for them nor holds them up.
	LockID int64 = 0x6b6673646d696772
	// SeedVersion is the version of the seed, the platform's migration
	// 0006, applied verbatim. The versions below it are kfsdb's stand-ins
	// for the platform's tables; those above it are kfsdb's own.
	SeedVersion int64 = 6
)

// Provider runs kfsdb's migrations ([migrations.FS]) with goose, in the
// [Mode] the database calls for. Every method that can change the database
// holds PostgreSQL's session advisory lock [LockID] for its whole run, on a
// connection of its own (polled every second for up to five minutes):
// concurrent runs against one database serialize, the mode is detected and
// recorded once, and each migration is applied once. Runs therefore need
// two connections of db. Methods are safe for concurrent use. On a nil
// Provider, one not made by [NewProvider], or with a nil context, every
// method that returns an error returns a *repo.InputError (errors.Is
// repo.ErrInvalidInput) and changes nothing.
type Provider struct {
	// AllowDataLoss lets [Provider.Down] and [Provider.DownTo] run each
	// migration's Down as written, dropping a table with its rows. Without
	// it (the default) every DROP TABLE of a Down is guarded, as in
	// [SQL]'s down export: a table that holds rows is refused with a
	// *[DataLossError], and that migration changes nothing. Set it before
	// the Provider is used; the platform modes' floor holds either way.
	AllowDataLoss bool

	db      *sql.DB
	locker  lock.SessionLocker
	extra   []goose.ProviderOption
	srcs    []source
	guarded fs.FS // the migrations with each Down's DROP TABLEs guarded
}

// Result is what a run did.
type Result struct {
	// Mode is the mode the run ran in.
	Mode Mode
	// Baseline is true when this run recorded the seed (0006) as applied
	// without running it ([ModePlatformSeeded]'s first run).
	Baseline bool
	// Applied lists the migrations applied (or, by Down and DownTo,
	// rolled back), in order. It is set also when the run failed: the
	// ones that succeeded before the failure.
	Applied []*goose.MigrationResult
	// Version is kfsdb's version after the run (0 if it could not be
	// read).
	Version int64
}

// NewProvider returns a Provider on db. Options extra are passed to
// goose's provider (for example goose.WithVerbose); they must not set the
// version table, a store, a locker or excluded versions, which the
// Provider sets. Closing the Provider closes db. A nil db or option is
// refused with a *repo.InputError naming it (errors.Is
// repo.ErrInvalidInput).
func NewProvider(db *sql.DB, extra ...goose.ProviderOption) (*Provider, error) {
	if db == nil {
		return nil, invalid("db", "must not be nil")
	}
	for i, o := range extra {
		if o == nil {
			return nil, invalid(fmt.Sprintf("extra[%d]", i), "must not be nil")
		}
	}
	locker, err := lock.NewPostgresSessionLocker(lock.WithLockID(LockID), lock.WithLockTimeout(1, 300))
	if err != nil {
		return nil, fmt.Errorf("could not create migration session locker: %w", err)
	}
	srcs, err := sources()
	if err != nil {
		return nil, fmt.Errorf("could not create migration provider: %w", err)
	}
	p := &Provider{db: db, locker: locker, extra: extra, srcs: srcs, guarded: guardedFS(srcs)}
	if _, err := p.goose(ModeStandalone, p.guarded); err != nil { // options checked once
		return nil, err
	}
	return p, nil
}

// guardedFS holds each migration of srcs as goose reads it, its Down
// section guarded: goose runs the guards in the migration's transaction.
func guardedFS(srcs []source) fs.FS {
	fsys := fstest.MapFS{}
	for _, s := range srcs {
		text := "-- +goose Up\n" + s.up + "\n\n-- +goose Down\n" + s.guarded + "\n"
		fsys[s.name] = &fstest.MapFile{Data: []byte(text), Mode: 0o444}
	}
	return fsys
}

// invalid is bad input to the migrate package: a *repo.InputError naming
// field and the rule it breaks.
func invalid(field, reason string) error {
	return fmt.Errorf("migrate: %w", &repo.InputError{Field: field, Reason: reason})
}

// usable refuses a Provider not made by NewProvider (nil or zero) and a
// nil ctx, with a *repo.InputError. Every method that can fail asks it
// first.
func (p *Provider) usable(ctx context.Context) error {
	switch {
	case p == nil || p.db == nil || p.locker == nil:
		return invalid("Provider", "must be made by migrate.NewProvider (is nil or a zero Provider)")
	case ctx == nil:
		return invalid("ctx", "must not be nil")
	}
	return nil
}

// Close closes the database handle given to [NewProvider].
func (p *Provider) Close() error {
	if err := p.usable(context.Background()); err != nil {
		return err
	}
	return p.db.Close()
}

// Sources lists every migration's version and file name, the stand-ins
// included, in version order. They are the embedded migrations, the same
// for every Provider, so a nil Provider lists them too.
func (p *Provider) Sources() []*goose.Source {
	srcs, _ := sources() // checked by NewProvider
	if p != nil && p.srcs != nil {
		srcs = p.srcs
	}
	out := make([]*goose.Source, 0, len(srcs))
	for _, s := range srcs {
		out = append(out, &goose.Source{Type: goose.TypeSQL, Path: s.name, Version: s.version})
	}
	return out
}

// goose returns a goose provider of the migrations in fsys
// ([migrations.FS], or guarded for a Down) for mode: kfsdb's version table,
// no global registry, no locker (the Provider holds LockID around it), and
// in the platform modes the stand-ins excluded.
func (p *Provider) goose(mode Mode, fsys fs.FS) (*goose.Provider, error) {
	opts := []goose.ProviderOption{
		goose.WithDisableGlobalRegistry(true),
		goose.WithTableName(VersionTable),
	}
	if mode != ModeStandalone {
		var standIns []int64
		for _, s := range p.srcs {
			if s.version < SeedVersion {
				standIns = append(standIns, s.version)
			}
		}
		opts = append(opts, goose.WithExcludeVersions(standIns))
	}
	g, err := goose.NewProvider(goose.DialectPostgres, p.db, fsys, append(opts, p.extra...)...)
	if err != nil {
		return nil, fmt.Errorf("could not create migration provider: %w", err)
	}
	return g, nil
}

// locked runs fn on a connection that holds LockID.
func (p *Provider) locked(ctx context.Context, fn func(conn *sql.Conn) error) (retErr error) {
	conn, err := p.db.Conn(ctx)
	if err != nil {
		return fmt.Errorf("could not connect: %w", err)
	}
	if err := p.locker.SessionLock(ctx, conn); err != nil {
		return errors.Join(fmt.Errorf("could not take kfsdb's migration lock %d: %w", LockID, err), conn.Close())
	}
	defer func() {
		uerr := p.locker.SessionUnlock(context.WithoutCancel(ctx), conn)
		if uerr != nil {
			uerr = fmt.Errorf("could not release kfsdb's migration lock: %w", uerr)
		}
		retErr = errors.Join(retErr, uerr, conn.Close())
	}()
	return fn(conn)
}

// prepareUp returns the mode for an up run, detecting and recording it
// when kfsdb has applied nothing yet; in ModePlatformSeeded it records the
// seed as applied (the baseline), in the same transaction.
func (p *Provider) prepareUp(ctx context.Context, conn *sql.Conn) (mode Mode, baseline bool, err error) {
	st, mode, recorded, err := modeOf(ctx, conn)
	if err != nil || recorded {
		return mode, false, err
	}
	store, err := database.NewStore(database.DialectPostgres, VersionTable)
	if err != nil {
		return mode, false, fmt.Errorf("could not create the version store: %w", err)
	}
	tx, err := conn.BeginTx(ctx, nil)
	if err != nil {
		return mode, false, fmt.Errorf("could not record the mode: %w", err)
	}
	defer func() { _ = tx.Rollback() }()
	if _, err := tx.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS `+ModeTable+` (
  -- One row: the mode kfsdb's migrations were installed in (kfsdb migrate).
  "singleton" BOOLEAN PRIMARY KEY DEFAULT true CHECK ("singleton"),
  "mode" TEXT NOT NULL CHECK ("mode" IN ('standalone', 'platform', 'platform-seeded')),
  "recorded_at" TIMESTAMPTZ NOT NULL DEFAULT now()
)`); err != nil {
		return mode, false, fmt.Errorf("could not create %s: %w", ModeTable, err)
	}
	if _, err := tx.ExecContext(ctx, `INSERT INTO `+ModeTable+` (mode) VALUES ($1)
ON CONFLICT (singleton) DO UPDATE SET mode = EXCLUDED.mode, recorded_at = now()`, string(mode)); err != nil {
		return mode, false, fmt.Errorf("could not record the mode in %s: %w", ModeTable, err)
	}
	if !st.versionTable {
		// As goose creates it: the table and its zero version.
		if err := store.CreateVersionTable(ctx, tx); err != nil {
			return mode, false, fmt.Errorf("could not create %s: %w", VersionTable, err)
		}
		if err := store.Insert(ctx, tx, database.InsertRequest{Version: 0}); err != nil {
			return mode, false, fmt.Errorf("could not create %s: %w", VersionTable, err)
		}
	}
	if mode == ModePlatformSeeded {
		if err := store.Insert(ctx, tx, database.InsertRequest{Version: SeedVersion}); err != nil {
			return mode, false, fmt.Errorf("could not record the seed as a baseline: %w", err)
		}
	}
	if err := tx.Commit(); err != nil {
		return mode, false, fmt.Errorf("could not record the mode: %w", err)
	}
	return mode, mode == ModePlatformSeeded, nil
}

// Up applies every pending migration in the database's mode (detected and
// recorded on the first run; see [Mode]). A database whose tables fit no
// mode is refused with a *[SchemaError] before anything changes, one that
// another tool migrated (kfsdb's tables, nothing in [VersionTable]) with
// an *[UnrecordedError]. On a
// failed migration goose's *goose.PartialError is wrapped, and
// Result.Applied holds the migrations applied before it.
func (p *Provider) Up(ctx context.Context) (*Result, error) {
	return p.UpTo(ctx, math.MaxInt64)
}

// UpTo is [Provider.Up] up to, and including, version.
func (p *Provider) UpTo(ctx context.Context, version int64) (*Result, error) {
	res := &Result{}
	if err := p.usable(ctx); err != nil {
		return res, err
	}
	err := p.locked(ctx, func(conn *sql.Conn) error {
		mode, baseline, err := p.prepareUp(ctx, conn)
		res.Mode, res.Baseline = mode, baseline
		if err != nil {
			return err
		}
		g, err := p.goose(mode, migrations.FS)
		if err != nil {
			return err
		}
		res.Applied, err = g.UpTo(ctx, version)
		var partial *goose.PartialError
		if errors.As(err, &partial) {
			res.Applied = partial.Applied
		}
		res.Version = p.version(ctx, conn)
		return err
	})
	return res, err
}

// FloorError is returned by [Provider.Down] and [Provider.DownTo] in the
// platform modes for a roll-back below the seed: the seed (0006) is the
// platform's migration, it changed the platform's tables, and the
// platform's rows may depend on it, so kfsdb rolls back only its own later
// migrations there. `kfsdb migrate sql --down --from 4 --standalone`
// prints the seed's Down (guarded) for a person to review and run.
type FloorError struct {
	Mode    Mode
	Version int64 // the version the database stays at
}

func (e *FloorError) Error() string {
	if e == nil {
		return "kfsdb does not roll back below the seed in the platform modes"
	}
	return fmt.Sprintf("kfsdb does not roll back below version %d in %s mode: the seed (0006) is the platform's migration and stays; the database stays at version %d",
		SeedVersion, e.Mode, e.Version)
}

// DataLossError is returned by [Provider.Down] and [Provider.DownTo],
// unless [Provider.AllowDataLoss] is set, when a migration's Down would
// drop a table that holds rows, or a column that holds values. The
// migration changed nothing: the guard locked the table, found a row (or
// a value) and raised, in the migration's transaction, which was rolled
// back. (DownTo keeps what it rolled back before that migration: tables
// without rows, columns without values.)
type DataLossError struct {
	Mode      Mode
	Migration int64  // the migration whose Down was refused
	Table     string // the table that holds rows (or the column's table)
	Column    string // the column that holds values; "" when the table is dropped
	Version   int64  // the version the database stays at
	Err       error  // the guard's error, SQLSTATE KF001
}

func (e *DataLossError) Error() string {
	if e.Column != "" {
		return fmt.Sprintf("kfsdb refuses to roll back migration %d: its Down would drop column %s of table %s, which holds values; that migration changed nothing and the database stays at version %d "+
			"(to drop the column with its values: --allow-data-loss, or Provider.AllowDataLoss)", e.Migration, e.Column, e.Table, e.Version)
	}
	return fmt.Sprintf("kfsdb refuses to roll back migration %d: its Down would drop table %s, which holds rows; that migration changed nothing and the database stays at version %d "+
		"(to drop the table with its rows: --allow-data-loss, or Provider.AllowDataLoss)", e.Migration, e.Table, e.Version)
}

func (e *DataLossError) Unwrap() error { return e.Err }

// Down rolls back the most recent migration. With nothing to roll back it
// returns goose.ErrNoNextVersion; at the seed in the platform modes, a
// *[FloorError]; for a DROP TABLE of a table with rows, a *[DataLossError]
// (unless [Provider.AllowDataLoss]). In [ModeStandalone], rolling back the
// last migration also deletes the recorded mode, so the next up detects
// it afresh.
func (p *Provider) Down(ctx context.Context) (*Result, error) {
	return p.down(ctx, true, 0)
}

// DownTo rolls back every migration above version, newest first, each in
// its own transaction. In the platform modes a version below the seed's is
// refused up front with a *[FloorError]. A migration whose Down would drop
// a table with rows stops it with a *[DataLossError] (unless
// [Provider.AllowDataLoss]): the migrations rolled back before it stay
// rolled back (the tables they dropped held no rows); Result.Applied lists
// them.
func (p *Provider) DownTo(ctx context.Context, version int64) (*Result, error) {
	return p.down(ctx, false, version)
}

func (p *Provider) down(ctx context.Context, byOne bool, version int64) (*Result, error) {
	res := &Result{}
	if err := p.usable(ctx); err != nil {
		return res, err
	}
	err := p.locked(ctx, func(conn *sql.Conn) error {
		st, err := readState(ctx, conn)
		if err != nil {
			return err
		}
		res.Mode, res.Version = st.mode, st.version
		if !st.applied {
			if byOne {
				return goose.ErrNoNextVersion
			}
			return nil
		}
		if st.mode != ModeStandalone && ((byOne && st.version <= SeedVersion) || (!byOne && version < SeedVersion)) {
			return &FloorError{Mode: st.mode, Version: st.version}
		}
		fsys := p.guarded
		if p.AllowDataLoss {
			fsys = migrations.FS
		}
		g, err := p.goose(st.mode, fsys)
		if err != nil {
			return err
		}
		if byOne {
			var r *goose.MigrationResult
			r, err = g.Down(ctx)
			if r != nil {
				res.Applied = []*goose.MigrationResult{r}
			}
		} else {
			res.Applied, err = g.DownTo(ctx, version)
		}
		var partial *goose.PartialError
		if errors.As(err, &partial) {
			res.Applied = partial.Applied
		}
		res.Version = p.version(ctx, conn)
		if lossErr := dataLoss(err, st.mode, res.Version); lossErr != nil {
			return lossErr
		}
		if err == nil && res.Version == 0 && st.mode == ModeStandalone {
			if _, derr := conn.ExecContext(ctx, `DELETE FROM `+ModeTable); derr != nil {
				return fmt.Errorf("could not clear the recorded mode: %w", derr)
			}
		}
		return err
	})
	return res, err
}

// dataLoss returns err, a failed Down, as a *DataLossError when a guard
// refused its table; nil otherwise. goose ran the guard in the
// migration's transaction, so the refusal is atomic with the drop it
// stopped: the check read the table after locking it, and nothing was
// dropped.
func dataLoss(err error, mode Mode, version int64) *DataLossError {
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || pgErr.Code != refusedDropCode {
		return nil
	}
	e := &DataLossError{Mode: mode, Table: pgErr.TableName, Column: pgErr.ColumnName, Version: version, Err: err}
	var partial *goose.PartialError
	if errors.As(err, &partial) && partial.Failed != nil && partial.Failed.Source != nil {
		e.Migration = partial.Failed.Source.Version
	}
	return e
}

// version reads the highest recorded version, 0 when it cannot.
func (p *Provider) version(ctx context.Context, q queryer) int64 {
	st, err := readState(context.WithoutCancel(ctx), q)
	if err != nil {
		return 0
	}
	return st.version
}

// GetDBVersion returns the highest version kfsdb recorded in
// [VersionTable], 0 when it recorded none (or the table does not exist).
// It changes nothing and takes no lock.
func (p *Provider) GetDBVersion(ctx context.Context) (int64, error) {
	if err := p.usable(ctx); err != nil {
		return 0, err
	}
	st, err := readState(ctx, p.db)
	return st.version, err
}

// MigrationState is the state of one migration in a [Status].
type MigrationState string

const (
	// StateApplied: kfsdb applied the migration.
	StateApplied MigrationState = "applied"
	// StatePending: the next up applies it.
	StatePending MigrationState = "pending"
	// StateBaseline: the seed, applied by the platform's runner and
	// recorded by kfsdb without running it.
	StateBaseline MigrationState = "baseline"
	// StatePlatform: a stand-in for a platform table, never applied in
	// the platform modes (the platform created the table).
	StatePlatform MigrationState = "platform's"
)

// MigrationStatus is one migration of a [Status].
type MigrationStatus struct {
	Version int64
	Name    string // the file name
	State   MigrationState
	// AppliedAt is when kfsdb recorded it (applied or baseline), in UTC;
	// zero otherwise.
	AppliedAt time.Time
}

// Status is what [Provider.Status] reports.
type Status struct {
	// Mode is the recorded mode, or, while kfsdb has applied nothing, the
	// mode the next up would run in (Recorded false).
	Mode     Mode
	Recorded bool
	// Version is the highest version kfsdb recorded, 0 for none.
	Version    int64
	Migrations []MigrationStatus
}

// Status reports the mode and every migration's state. It changes nothing
// and takes no lock; on a database kfsdb has not migrated it detects the
// mode (a *[SchemaError] if the tables fit none, an *[UnrecordedError] if
// another tool applied kfsdb's migrations there).
func (p *Provider) Status(ctx context.Context) (*Status, error) {
	if err := p.usable(ctx); err != nil {
		return nil, err
	}
	conn, err := p.db.Conn(ctx)
	if err != nil {
		return nil, fmt.Errorf("could not connect: %w", err)
	}
	defer func() { _ = conn.Close() }()
	st, mode, recorded, err := modeOf(ctx, conn)
	if err != nil {
		return nil, err
	}
	out := &Status{Mode: mode, Recorded: recorded, Version: st.version}
	applied := map[int64]time.Time{}
	if st.versionTable {
		rows, err := conn.QueryContext(ctx, `SELECT version_id, max(tstamp) FROM `+VersionTable+` WHERE is_applied AND version_id > 0 GROUP BY version_id`)
		if err != nil {
			return nil, fmt.Errorf("could not read %s: %w", VersionTable, err)
		}
		defer func() { _ = rows.Close() }()
		for rows.Next() {
			var v int64
			var at time.Time
			if err := rows.Scan(&v, &at); err != nil {
				return nil, fmt.Errorf("could not read %s: %w", VersionTable, err)
			}
			applied[v] = at.UTC()
		}
		if err := rows.Err(); err != nil {
			return nil, fmt.Errorf("could not read %s: %w", VersionTable, err)
		}
	}
	for _, s := range p.srcs {
		ms := MigrationStatus{Version: s.version, Name: s.name, State: StatePending}
		at, ok := applied[s.version]
		switch {
		case mode != ModeStandalone && s.version < SeedVersion:
			ms.State = StatePlatform
		case ok && mode == ModePlatformSeeded && s.version == SeedVersion:
			ms.State, ms.AppliedAt = StateBaseline, at
		case ok:
			ms.State, ms.AppliedAt = StateApplied, at
		}
		out.Migrations = append(out.Migrations, ms)
	}
	return out, nil
}
