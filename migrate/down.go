package migrate

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/pressly/goose/v3"

	"github.com/knowledgefs/kfsdb/db/migrations"
)

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
