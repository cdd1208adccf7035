package migrate

import (
	"context"
	"fmt"
	"time"
)

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
