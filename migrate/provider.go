package migrate

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io/fs"
	"testing/fstest"

	"github.com/pressly/goose/v3"
	"github.com/pressly/goose/v3/lock"

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
