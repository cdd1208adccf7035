// Package migrate runs kfsdb's goose migrations ([migrations.FS], embedded
// from db/migrations) so that they coexist with the platform's tables and
// an application's own goose history:
//
//   - kfsdb records its versions in its own table, [VersionTable]
//     (kfsdb_db_version), never goose's default goose_db_version, and
//     holds its own advisory lock, [LockID], around every run;
//   - each run works in a [Mode], detected from the catalog before the
//     first change and recorded in [ModeTable]: [ModeStandalone] (no
//     platform tables: kfsdb's stand-ins 00001-00004 create them),
//     [ModePlatform] (the platform's tables are there: checked, stand-ins
//     skipped) or [ModePlatformSeeded] (the platform's runner applied the
//     seed 0006 too: checked to be exactly the seed, recorded as a baseline,
//     only later migrations run). Tables that fit no mode are refused with
//     a *[SchemaError] naming what is missing or differs, and kfsdb's own
//     tables without kfsdb's version history (another tool applied the
//     migrations, such as [SQL]'s output run with psql) with an
//     *[UnrecordedError] naming what it found;
//   - [SQL] prints the migrations' exact SQL for teams whose migrations are
//     run by another tool;
//   - no Down drops a table that holds rows: each DROP TABLE of a Down,
//     printed by [SQL] or run by [Provider.Down], locks its table and
//     refuses if it holds a row (a *[DataLossError] unless
//     [Provider.AllowDataLoss]), and [SQL] prints the Downs below the seed
//     only for a standalone database ([SQLOptions]).
//
// `kfsdb migrate` is built on it, and so is the test harness
// (tests/pgtest), which migrates its template databases with [Up]. The
// module requires only kfsdb, goose and pgx.
package migrate

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib" // also registers the "pgx" database/sql driver

	"github.com/knowledgefs/kfsdb/migrate/redact"
)

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
// setting's unit (else a *repo.InputError naming it).
func OpenSQLWithLockTimeout(ctx context.Context, url string, lockTimeout time.Duration) (*sql.DB, error) {
	if lockTimeout == 0 {
		return OpenSQL(ctx, url)
	}
	if lockTimeout < time.Millisecond {
		return nil, invalid("lockTimeout", fmt.Sprintf("must be zero or at least 1ms, got %s", lockTimeout))
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

// Up applies every pending migration to the database at url, in the
// database's mode (see [Provider.Up]), and closes its connections before
// returning.
func Up(ctx context.Context, url string) (*Result, error) {
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
