package migrate

import (
	"bufio"
	"fmt"
	"io/fs"
	"path"
	"slices"
	"strconv"
	"strings"

	"github.com/knowledgefs/kfsdb/db/migrations"
)

// Direction is which way [SQL] exports the migrations.
type Direction string

const (
	// DirectionUp is the SQL that applies migrations, oldest first.
	DirectionUp Direction = "up"
	// DirectionDown is the SQL that rolls them back, newest first.
	DirectionDown Direction = "down"
)

// source is one migration file of [migrations.FS], split the way goose
// splits it: the comments before "-- +goose Up", the Up section and the
// Down section, each verbatim; and the Down section with each DROP TABLE
// guarded (guard.go), with the tables it drops.
type source struct {
	version  int64
	name     string // file name, e.g. 00006_document_compilation_attempts.sql
	preamble string
	up       string
	down     string
	guarded  string   // down, each DROP TABLE guarded
	drops    []string // the tables down drops, in order
}

// sources returns every migration of [migrations.FS] in version order. It
// refuses a file that uses an annotation other than Up, Down,
// StatementBegin and StatementEnd: each migration then runs as goose runs
// it, statement for statement, in one transaction, and [SQL] can print it
// exactly (no NO TRANSACTION, no ENVSUB substitution).
func sources() ([]source, error) {
	names, err := fs.Glob(migrations.FS, "*.sql")
	if err != nil {
		return nil, fmt.Errorf("could not list migrations: %w", err)
	}
	slices.Sort(names)
	out := make([]source, 0, len(names))
	for _, name := range names {
		b, err := fs.ReadFile(migrations.FS, name)
		if err != nil {
			return nil, fmt.Errorf("could not read migration %s: %w", name, err)
		}
		s, err := parseSource(path.Base(name), string(b))
		if err != nil {
			return nil, err
		}
		if len(out) > 0 && out[len(out)-1].version == s.version {
			return nil, fmt.Errorf("migrations %s and %s have the same version %d", out[len(out)-1].name, s.name, s.version)
		}
		out = append(out, s)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("no migrations in db/migrations")
	}
	return out, nil
}

func parseSource(name, text string) (source, error) {
	digits, _, ok := strings.Cut(name, "_")
	v, err := strconv.ParseInt(digits, 10, 64)
	if !ok || err != nil || v < 1 {
		return source{}, fmt.Errorf("migration %s: the name must start with a positive version and '_'", name)
	}
	s := source{version: v, name: name}
	var sections [3]strings.Builder // preamble, up, down
	cur := 0
	sc := bufio.NewScanner(strings.NewReader(text))
	sc.Buffer(make([]byte, 0, 64*1024), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if annotation, ok := gooseAnnotation(line); ok {
			switch annotation {
			case "Up":
				if cur != 0 {
					return source{}, fmt.Errorf("migration %s: '-- +goose Up' must come once, before '-- +goose Down'", name)
				}
				cur = 1
				continue
			case "Down":
				if cur != 1 {
					return source{}, fmt.Errorf("migration %s: '-- +goose Down' must come once, after '-- +goose Up'", name)
				}
				cur = 2
				continue
			case "StatementBegin", "StatementEnd":
				// Kept: a comment to any other tool, a statement
				// boundary to goose.
			default:
				return source{}, fmt.Errorf("migration %s: annotation %q is not supported (kfsdb's migrations each run in one transaction, as written)", name, strings.TrimSpace(line))
			}
		}
		sections[cur].WriteString(line)
		sections[cur].WriteByte('\n')
	}
	if err := sc.Err(); err != nil {
		return source{}, fmt.Errorf("migration %s: %w", name, err)
	}
	if cur != 2 {
		return source{}, fmt.Errorf("migration %s: needs both '-- +goose Up' and '-- +goose Down'", name)
	}
	s.preamble = strings.TrimSpace(sections[0].String())
	s.up = strings.TrimSpace(sections[1].String())
	s.down = strings.TrimSpace(sections[2].String())
	if s.up == "" || s.down == "" {
		return source{}, fmt.Errorf("migration %s: its Up and Down sections must not be empty", name)
	}
	guarded, drops, err := guardDown(name, s.down)
	if err != nil {
		return source{}, err
	}
	s.guarded, s.drops = guarded, drops
	return s, nil
}

// SQLOptions are the options of [SQL].
type SQLOptions struct {
	// Standalone allows a [DirectionDown] export below the seed (from
	// below [SeedVersion]): the Down of the seed, which drops the
	// attempts and outbox tables and alters the platform's tables, and
	// from 0 those of the stand-ins, which drop the platform's tables.
	// Set it only for a database that kfsdb's stand-ins created
	// (standalone mode); on a platform database those tables are the
	// platform's. It changes nothing for [DirectionUp]. Defaults to
	// false: such an export is refused with a *[DownBelowSeedError].
	Standalone bool
}

// DownBelowSeedError is returned by [SQL] for a [DirectionDown] export
// from below the seed without [SQLOptions.Standalone]: on a platform
// database it would drop the platform's tables.
type DownBelowSeedError struct {
	From int64
	// Tables are the tables the export would drop, in the order it drops
	// them: the seed's, and from below 4 the stand-ins' too.
	Tables []string
}

func (e *DownBelowSeedError) Error() string {
	return fmt.Sprintf("kfsdb does not print the Down below version %d (--from %d) unless told the database is standalone: on a platform database it would drop the platform's tables %s; "+
		"use --from %d for kfsdb's own migrations, or --standalone (SQLOptions.Standalone) for a database that kfsdb's stand-ins created",
		SeedVersion, e.From, strings.Join(e.Tables, ", "), SeedVersion)
}

// SQL returns the SQL of kfsdb's migrations after version from, in the
// order they run, for teams whose migrations are run by another tool (a
// goose history of their own, Atlas, Flyway, psql): [DirectionUp] applies
// versions from+1 up to the latest, oldest first; [DirectionDown] rolls the
// same versions back, newest first, leaving the schema of version from.
// from is 0 (every migration) or the version of one of them: 4 for a
// database that has the platform's tables but not the seed (0006), 6 for
// one whose platform already applied the seed. A down export from below 6
// drops the seed's tables, and from below 4 the platform's: it is refused
// with a *[DownBelowSeedError] unless opts.Standalone says the database is
// kfsdb's alone.
//
// Each migration is headed by a comment naming it and is the file's
// section verbatim (goose's StatementBegin/End annotations stay, as
// comments), except that in a down export each DROP TABLE is guarded: one
// DO statement locks the table (ACCESS EXCLUSIVE), raises, dropping
// nothing, if it holds a row (SQLSTATE KF001, naming the table), and only
// then drops it; it refuses to run outside READ COMMITTED. A Down holding a
// statement that could lose rows and cannot be guarded is refused with a
// *[UnguardedDropError]. Run each migration in a transaction, as `kfsdb
// migrate` does. Nothing is recorded in kfsdb_db_version: the other tool
// keeps its own history.
func SQL(direction Direction, from int64, opts SQLOptions) (string, error) {
	if direction != DirectionUp && direction != DirectionDown {
		return "", fmt.Errorf("direction must be %q or %q, got %q", DirectionUp, DirectionDown, direction)
	}
	srcs, err := sources()
	if err != nil {
		return "", err
	}
	var versions []string
	known := from == 0
	var picked []source
	for _, s := range srcs {
		versions = append(versions, strconv.FormatInt(s.version, 10))
		known = known || s.version == from
		if s.version > from {
			picked = append(picked, s)
		}
	}
	if !known {
		return "", fmt.Errorf("--from %d is not 0 or a migration version (%s)", from, strings.Join(versions, ", "))
	}
	var b strings.Builder
	latest := srcs[len(srcs)-1].version
	if direction == DirectionDown {
		slices.Reverse(picked)
		if from < SeedVersion && !opts.Standalone {
			belowSeed := &DownBelowSeedError{From: from}
			for _, s := range picked {
				if s.version <= SeedVersion {
					belowSeed.Tables = append(belowSeed.Tables, s.drops...)
				}
			}
			return "", belowSeed
		}
		fmt.Fprintf(&b, "-- kfsdb migrations, down: from version %d to version %d. Run each migration in a transaction.\n", latest, from)
		b.WriteString("-- Each DROP TABLE is guarded: it locks the table, and raises, dropping nothing, if the table holds rows.\n")
	} else {
		fmt.Fprintf(&b, "-- kfsdb migrations, up: from version %d to version %d. Run each migration in a transaction.\n", from, latest)
	}
	if len(picked) == 0 {
		fmt.Fprintf(&b, "-- (no migration after version %d)\n", from)
	}
	for _, s := range picked {
		fmt.Fprintf(&b, "\n-- kfsdb migration %d %s: %s\n", s.version, direction, s.name)
		if direction == DirectionUp {
			if s.preamble != "" {
				b.WriteString(s.preamble)
				b.WriteString("\n\n")
			}
			b.WriteString(s.up)
		} else {
			b.WriteString(s.guarded)
		}
		b.WriteString("\n")
	}
	return b.String(), nil
}
