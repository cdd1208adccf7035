package migrate

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
)

// state is what the database records of kfsdb's migrations.
type state struct {
	versionTable bool
	applied      bool  // a version above 0 is recorded
	version      int64 // the highest recorded version
	mode         Mode  // "" when not recorded
}

func readState(ctx context.Context, q queryer) (state, error) {
	var st state
	var modeTable bool
	rows, err := q.QueryContext(ctx, `SELECT to_regclass($1) IS NOT NULL, to_regclass($2) IS NOT NULL`, VersionTable, ModeTable)
	if err != nil {
		return st, fmt.Errorf("could not read kfsdb's migration state: %w", err)
	}
	if err := scanOne(rows, &st.versionTable, &modeTable); err != nil {
		return st, fmt.Errorf("could not read kfsdb's migration state: %w", err)
	}
	if st.versionTable {
		rows, err := q.QueryContext(ctx, `SELECT coalesce(max(version_id), 0) FROM `+VersionTable)
		if err != nil {
			return st, fmt.Errorf("could not read %s: %w", VersionTable, err)
		}
		if err := scanOne(rows, &st.version); err != nil {
			return st, fmt.Errorf("could not read %s: %w", VersionTable, err)
		}
		st.applied = st.version > 0
	}
	if modeTable {
		rows, err := q.QueryContext(ctx, `SELECT mode FROM `+ModeTable)
		if err != nil {
			return st, fmt.Errorf("could not read %s: %w", ModeTable, err)
		}
		var mode sql.NullString
		if err := scanOne(rows, &mode); err != nil && !errors.Is(err, sql.ErrNoRows) {
			return st, fmt.Errorf("could not read %s: %w", ModeTable, err)
		}
		st.mode = Mode(mode.String)
	}
	if st.applied {
		if !slices.Contains(Modes(), st.mode) {
			return st, fmt.Errorf("%s records version %d but %s records no known mode (%q): kfsdb cannot tell which migrations apply; restore the row (one of %v)",
				VersionTable, st.version, ModeTable, st.mode, Modes())
		}
	}
	return st, nil
}

// scanOne scans the only row of rows and closes them.
func scanOne(rows *sql.Rows, dest ...any) error {
	defer func() { _ = rows.Close() }()
	if !rows.Next() {
		if err := rows.Err(); err != nil {
			return err
		}
		return sql.ErrNoRows
	}
	if err := rows.Scan(dest...); err != nil {
		return err
	}
	return rows.Close()
}

// modeOf returns the recorded mode when kfsdb has applied something, else
// the mode the tables call for (recorded false).
func modeOf(ctx context.Context, conn *sql.Conn) (st state, mode Mode, recorded bool, err error) {
	st, err = readState(ctx, conn)
	if err != nil {
		return st, "", false, err
	}
	if st.applied {
		return st, st.mode, true, nil
	}
	mode, err = detect(ctx, conn, st.versionTable)
	return st, mode, false, err
}
