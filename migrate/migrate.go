// Package migrate runs kfsdb's goose migrations ([migrations.FS], embedded
// from db/migrations) with goose's Provider API: no global registry, and
// PostgreSQL's session lock around every run. `kfsdb migrate` is built on
// it, and so is the test harness (tests/pgtest), which migrates its
// template databases the same way.
package migrate

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib" // also registers the "pgx" database/sql driver
	"github.com/pressly/goose/v3"
	"github.com/pressly/goose/v3/lock"

	"github.com/knowledgefs/kfsdb/db/migrations"
	"github.com/knowledgefs/kfsdb/migrate/redact"
)

// NewProvider returns a goose Provider over [migrations.FS] for db.
//
// The Provider takes PostgreSQL's session-level lock (goose's
// lock.NewPostgresSessionLocker, polled every second for up to five minutes)
// around every run, so concurrent `up` runs against one database serialize
// and each migration is applied once. It does not use goose's global
// registry. extra options are appended. Closing the Provider closes db.
func NewProvider(db *sql.DB, extra ...goose.ProviderOption) (*goose.Provider, error) {
	if db == nil {
		return nil, errors.New("could not create migration provider: db is nil")
	}
	locker, err := lock.NewPostgresSessionLocker(lock.WithLockTimeout(1, 300))
	if err != nil {
		return nil, fmt.Errorf("could not create migration session locker: %w", err)
	}
	opts := append([]goose.ProviderOption{
		goose.WithDisableGlobalRegistry(true),
		goose.WithSessionLocker(locker),
	}, extra...)
	p, err := goose.NewProvider(goose.DialectPostgres, db, migrations.FS, opts...)
	if err != nil {
		return nil, fmt.Errorf("could not create migration provider: %w", err)
	}
	return p, nil
}

// OpenSQL opens a database/sql handle on url with the pgx stdlib driver and
// checks that the server answers. The caller closes it. Errors name url
// without its password.
func OpenSQL(ctx context.Context, url string) (*sql.DB, error) {
	db, err := sql.Open("pgx", url)
	if err != nil {
		return nil, fmt.Errorf("could not open %s: %w", redact.Text(url), err)
	}
	if err := db.PingContext(ctx); err != nil {
		_ = db.Close()
		return nil, fmt.Errorf("could not connect to %s: %w", redact.Text(url), err)
	}
	return db, nil
}

// OpenSQLWithLockTimeout is [OpenSQL] with PostgreSQL's lock_timeout set to
// lockTimeout on every connection of the handle, so a migration statement
// that waits longer than that for a lock fails (SQLSTATE 55P03) and goose
// rolls its transaction back. Waiting without a bound is the danger: a
// statement queued for an ACCESS EXCLUSIVE lock behind a long transaction
// blocks every later read of the table too. The setting travels in the
// connection's startup packet, so it also holds on the one connection goose
// runs the migrations on. Zero leaves the server's setting (no limit by
// default); lockTimeout must otherwise be at least a millisecond, the
// setting's unit.
func OpenSQLWithLockTimeout(ctx context.Context, url string, lockTimeout time.Duration) (*sql.DB, error) {
	if lockTimeout == 0 {
		return OpenSQL(ctx, url)
	}
	if lockTimeout < time.Millisecond {
		return nil, fmt.Errorf("lock timeout must be zero or at least 1ms, got %s", lockTimeout)
	}
	cfg, err := pgx.ParseConfig(url)
	if err != nil {
		return nil, fmt.Errorf("could not parse %s: %w", redact.Text(url), err)
	}
	cfg.RuntimeParams["lock_timeout"] = fmt.Sprintf("%dms", lockTimeout.Milliseconds())
	db := stdlib.OpenDB(*cfg)
	if err := db.PingContext(ctx); err != nil {
		_ = db.Close()
		return nil, fmt.Errorf("could not connect to %s: %w", redact.Text(url), err)
	}
	return db, nil
}

// Up applies every pending migration to the database at url and closes its
// connections before returning.
func Up(ctx context.Context, url string) ([]*goose.MigrationResult, error) {
	db, err := OpenSQL(ctx, url)
	if err != nil {
		return nil, err
	}
	p, err := NewProvider(db)
	if err != nil {
		_ = db.Close()
		return nil, err
	}
	res, err := p.Up(ctx)
	if cerr := p.Close(); err == nil && cerr != nil {
		err = fmt.Errorf("could not close migration provider: %w", cerr)
	}
	return res, err
}
