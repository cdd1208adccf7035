package migrate

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math"

	"github.com/pressly/goose/v3"
	"github.com/pressly/goose/v3/database"

	"github.com/knowledgefs/kfsdb/db/migrations"
)

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
