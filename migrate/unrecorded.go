package migrate

import (
	"fmt"
	"regexp"
	"slices"
	"strings"
)

// UnrecordedError is returned, before anything is changed, by
// [Provider.Up], [Provider.UpTo] and [Provider.Status] on a database that
// holds kfsdb's own tables (the seed's, 0006, and those of the migrations
// after it) while [VersionTable] records no migration: another tool
// applied them, typically `kfsdb migrate sql --up` run with psql. That
// tool keeps the database's migration history, so kfsdb can neither tell
// which versions are applied nor apply the next ones without repeating
// them; it reports what it found instead.
type UnrecordedError struct {
	// VersionTable is true when [VersionTable] exists but records no
	// migration, false when it does not exist.
	VersionTable bool
	// Found lists, oldest first, each migration from the seed (0006) on
	// whose objects are in the database, with those objects.
	Found []FoundMigration
}

// FoundMigration is one migration whose objects an [UnrecordedError]
// found.
type FoundMigration struct {
	Version int64
	// Name is the migration's file name.
	Name string
	// Objects are the objects of the migration found, each as "table t",
	// "index i on t" or "trigger g on t", in the migration's order.
	Objects []string
}

// Latest is the newest version found.
func (e *UnrecordedError) Latest() int64 {
	if e == nil || len(e.Found) == 0 {
		return 0
	}
	return e.Found[len(e.Found)-1].Version
}

func (e *UnrecordedError) Error() string {
	if e == nil {
		return "kfsdb's migrations were applied by another tool"
	}
	var found []string
	for _, f := range e.Found {
		found = append(found, fmt.Sprintf("%d %s (%s)", f.Version, f.Name, strings.Join(f.Objects, ", ")))
	}
	return fmt.Sprintf("kfsdb's migrations were applied here by another tool, not by kfsdb migrate: %s, yet kfsdb's tables exist: %s. %s",
		e.History(), strings.Join(found, "; "), e.Advice())
}

// History says what [VersionTable] holds: nothing, or no table at all.
func (e *UnrecordedError) History() string {
	if e != nil && e.VersionTable {
		return VersionTable + " records no migration"
	}
	return VersionTable + " does not exist"
}

// Advice says where the database's migrations come from and what to do.
func (e *UnrecordedError) Advice() string {
	return fmt.Sprintf("That is what `kfsdb migrate sql --up` applied with psql (or another runner) leaves; that tool keeps this database's migration history, "+
		"so kfsdb migrate up, down and status do not manage it and changed nothing: apply later migrations the same way "+
		"(`kfsdb migrate sql --up --from %d` prints those after version %d)", e.Latest(), e.Latest())
}

// createdRe matches the statements of a migration's Up section that create
// an object the catalog describes, by name: tables, indexes and triggers
// (constraint triggers too).
var createdRe = regexp.MustCompile(`(?im)^\s*CREATE\s+(?:UNIQUE\s+)?(?:CONSTRAINT\s+)?(TABLE|INDEX|TRIGGER)\s+(?:CONCURRENTLY\s+)?(?:IF\s+NOT\s+EXISTS\s+)?"?([A-Za-z_][A-Za-z0-9_]*)"?`)

// unrecorded returns an *UnrecordedError when the database described by
// target holds objects that kfsdb's migrations from the seed on create
// (the seed's tables are seedTables), nil otherwise. It is asked only when
// kfsdb recorded no migration.
func unrecorded(target catalog, srcs []source, seedTables []string, versionTable bool) error {
	e := &UnrecordedError{VersionTable: versionTable}
	later := false
	for _, s := range srcs {
		if s.version < SeedVersion {
			continue
		}
		f := FoundMigration{Version: s.version, Name: s.name}
		if s.version == SeedVersion {
			for _, t := range seedTables {
				if target.has(t) {
					f.Objects = append(f.Objects, "table "+t)
				}
			}
		} else {
			for _, m := range createdRe.FindAllStringSubmatch(s.up, -1) {
				kind := strings.ToLower(m[1])
				k, _, ok := target.named(kind, m[2])
				switch {
				case !ok:
				case kind == "table":
					f.Objects = append(f.Objects, "table "+k.table)
				default:
					f.Objects = append(f.Objects, kind+" "+k.name+" on "+k.table)
				}
			}
			later = later || len(f.Objects) > 0
		}
		if len(f.Objects) > 0 {
			f.Objects = slices.Compact(f.Objects)
			e.Found = append(e.Found, f)
		}
	}
	if !later {
		return nil // no object of kfsdb's own: a mode decides (the seed alone is platform-seeded)
	}
	return e
}
