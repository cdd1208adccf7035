package migrate

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
)

// Mode is how kfsdb's migrations meet the database: whether kfsdb creates
// the platform's tables itself and whether it runs the seed (0006). It is
// detected from the catalog on the first run that changes the database,
// recorded in [ModeTable], and read from there on every later run, so it
// never changes under an installed schema.
type Mode string

const (
	// ModeStandalone: the database has none of the platform's tables
	// (a demo, the tests, a team without the platform). kfsdb applies its
	// stand-ins for them (00001-00004) and then everything else. Down rolls
	// back every migration, the stand-ins too.
	ModeStandalone Mode = "standalone"
	// ModePlatform: the platform's knowledge_spaces, document_assets,
	// projection_set_publications and projection_set_publication_heads
	// exist, without document_compilation_attempts and the outbox. kfsdb
	// checks that they have what the seed needs (the columns, types and
	// keys its foreign keys reference, and the columns kfsdb's queries
	// read), skips its stand-ins, and applies the seed (0006) and
	// everything after it. Down rolls back kfsdb's own migrations after
	// the seed and stops there: the seed is the platform's migration and
	// changed the platform's tables, so kfsdb never rolls it back.
	ModePlatform Mode = "platform"
	// ModePlatformSeeded: the platform's tables and the seed's two tables
	// exist (the platform's own runner applied the seed). kfsdb checks that
	// the seed's tables, and what the seed added to the platform's tables,
	// match the seed exactly (columns, constraints, indexes, triggers),
	// records the seed as applied without running it (a baseline), and
	// applies only the migrations after it. Down stops at the seed, as in
	// ModePlatform.
	ModePlatformSeeded Mode = "platform-seeded"
)

// Modes returns every Mode.
func Modes() []Mode { return []Mode{ModeStandalone, ModePlatform, ModePlatformSeeded} }

// Describe says in one line what the mode means for the migrations.
func (m Mode) Describe() string {
	switch m {
	case ModeStandalone:
		return "no platform tables: kfsdb's stand-ins 00001-00004 for them are applied, then kfsdb's migrations"
	case ModePlatform:
		return "on the platform's tables: kfsdb's stand-ins 00001-00004 are skipped; the seed 0006 and kfsdb's later migrations are applied; down stops at 0006"
	case ModePlatformSeeded:
		return "on a platform that already applied the seed: 0006 is recorded as a baseline, not run; only kfsdb's later migrations are applied; down stops at 0006"
	}
	return "unknown mode"
}

// SchemaError is returned, before anything is changed, when the database's
// tables fit no mode: some of the platform's tables or of the seed's are
// missing (Mode ""), the platform's tables lack what the seed needs (Mode
// [ModePlatform]), or the seed's tables differ from what the seed creates
// (Mode [ModePlatformSeeded]). Problems names each one.
type SchemaError struct {
	// Mode is the mode the tables point to, "" when none.
	Mode Mode
	// Problems names what is missing or differs, one item each, sorted.
	Problems []string
}

func (e *SchemaError) Error() string {
	if e == nil {
		return "kfsdb refuses to migrate, nothing was changed: the database's tables fit no mode"
	}
	var what string
	switch e.Mode {
	case ModePlatform:
		what = "the platform's tables lack what migration 0006 (the seed) needs"
	case ModePlatformSeeded:
		what = "the seed's tables (applied by another runner) differ from what migration 0006 creates"
	default:
		what = "the database has only some of the platform's or the seed's tables"
	}
	return fmt.Sprintf("kfsdb refuses to migrate, nothing was changed: %s: %s", what, strings.Join(e.Problems, "; "))
}

// fkReferencesQuery lists the (table, column) pairs that the foreign keys
// of the temporary schema's tables reference.
const fkReferencesQuery = `
SELECT DISTINCT c.relname, rc.relname, ra.attname
  FROM pg_constraint con
  JOIN pg_class c ON c.oid = con.conrelid
  JOIN pg_class rc ON rc.oid = con.confrelid
 CROSS JOIN LATERAL unnest(con.confkey) AS k(attnum)
  JOIN pg_attribute ra ON ra.attrelid = con.confrelid AND ra.attnum = k.attnum
 WHERE con.contype = 'f' AND c.relnamespace = pg_my_temp_schema()
`

// platformColumnsRead are the columns of the platform's tables that
// kfsdb's queries (db/queries) read besides those the seed's foreign keys
// reference: Start reads the head revision, Advance checks that a
// candidate publication's status is 'candidate'. Their types must be the
// stand-ins'.
var platformColumnsRead = map[string][]string{
	"projection_set_publication_heads": {"tenant_id", "knowledge_space_id", "head_revision"},
	"projection_set_publications":      {"status"},
}

// reference is what kfsdb makes of the seed: the stand-ins' catalog before
// the seed (before) and after it (after), in a temporary schema, and the
// columns the seed's foreign keys reference.
type reference struct {
	before, after catalog
	fkColumns     []objKey // kind "column": referenced table and column
}

// seedTables are the tables the seed creates; standInTables those the
// stand-ins create (the platform's).
func (r *reference) seedTables() []string {
	var out []string
	for _, t := range r.after.tables() {
		if !r.before.has(t) {
			out = append(out, t)
		}
	}
	return out
}

func (r *reference) standInTables() []string { return r.before.tables() }

// detect returns the mode the current schema's tables point to, after
// checking that the tables fit it, or a *SchemaError; an *UnrecordedError
// when kfsdb's own migrations' objects are there already (versionTable:
// whether VersionTable exists, recording nothing). It changes nothing: the
// reference schema is made of temporary tables in a transaction that is
// rolled back.
func detect(ctx context.Context, conn *sql.Conn, versionTable bool) (Mode, error) {
	srcs, err := sources()
	if err != nil {
		return "", err
	}
	tx, err := conn.BeginTx(ctx, nil)
	if err != nil {
		return "", fmt.Errorf("could not begin the mode detection: %w", err)
	}
	defer func() { _ = tx.Rollback() }()
	var schema sql.NullString
	if err := tx.QueryRowContext(ctx, `SELECT current_schema()`).Scan(&schema); err != nil {
		return "", fmt.Errorf("could not read the current schema: %w", err)
	}
	if !schema.Valid {
		return "", errors.New("no schema to migrate: search_path names no existing schema")
	}
	target, err := describe(ctx, tx, currentSchemaOID)
	if err != nil {
		return "", err
	}
	ref, err := buildReference(ctx, tx, srcs)
	if err != nil {
		return "", err
	}
	if err := tx.Rollback(); err != nil {
		return "", fmt.Errorf("could not roll back the mode detection: %w", err)
	}
	if err := unrecorded(target, srcs, ref.seedTables(), versionTable); err != nil {
		return "", err
	}
	return classify(target, ref)
}

// buildReference applies the stand-ins and the seed, verbatim, to temporary
// tables (search_path pg_temp, for this transaction only) and describes
// them before and after the seed.
func buildReference(ctx context.Context, tx *sql.Tx, srcs []source) (*reference, error) {
	if _, err := tx.ExecContext(ctx, `SET LOCAL search_path = pg_temp`); err != nil {
		return nil, fmt.Errorf("could not switch to the temporary schema: %w", err)
	}
	var seed *source
	for i, s := range srcs {
		switch {
		case s.version < SeedVersion:
			if _, err := tx.ExecContext(ctx, s.up); err != nil {
				return nil, fmt.Errorf("could not apply %s to temporary tables (kfsdb needs the TEMPORARY privilege to compare catalogs): %w", s.name, err)
			}
		case s.version == SeedVersion:
			seed = &srcs[i]
		}
	}
	if seed == nil {
		return nil, fmt.Errorf("no migration %d (the seed) in db/migrations", SeedVersion)
	}
	ref := &reference{}
	var err error
	if ref.before, err = describe(ctx, tx, tempSchemaOID); err != nil {
		return nil, err
	}
	if _, err := tx.ExecContext(ctx, seed.up); err != nil {
		return nil, fmt.Errorf("could not apply %s to temporary tables: %w", seed.name, err)
	}
	if ref.after, err = describe(ctx, tx, tempSchemaOID); err != nil {
		return nil, err
	}
	rows, err := tx.QueryContext(ctx, fkReferencesQuery)
	if err != nil {
		return nil, fmt.Errorf("could not read the seed's foreign keys: %w", err)
	}
	defer func() { _ = rows.Close() }()
	for rows.Next() {
		var from, table, column string
		if err := rows.Scan(&from, &table, &column); err != nil {
			return nil, fmt.Errorf("could not read the seed's foreign keys: %w", err)
		}
		if ref.before.has(table) { // a platform table, not the seed's own
			ref.fkColumns = append(ref.fkColumns, objKey{"column", table, column})
		}
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("could not read the seed's foreign keys: %w", err)
	}
	return ref, nil
}

// classify picks the mode from which tables exist and checks that they fit
// it.
func classify(target catalog, ref *reference) (Mode, error) {
	present := func(tables []string) (have, missing []string) {
		for _, t := range tables {
			if target.has(t) {
				have = append(have, t)
			} else {
				missing = append(missing, t)
			}
		}
		return have, missing
	}
	platformHave, platformMissing := present(ref.standInTables())
	seedHave, seedMissing := present(ref.seedTables())
	switch {
	case len(platformHave) == 0 && len(seedHave) == 0:
		return ModeStandalone, nil
	case len(platformMissing) > 0 || (len(seedHave) > 0 && len(seedMissing) > 0):
		var problems []string
		for _, t := range platformMissing {
			problems = append(problems, "missing the platform's table "+t)
		}
		if len(seedHave) > 0 {
			for _, t := range seedMissing {
				problems = append(problems, "missing the seed's table "+t+" (the seed's "+strings.Join(seedHave, ", ")+" exists)")
			}
		}
		slices.Sort(problems)
		return "", &SchemaError{Problems: problems}
	case len(seedHave) == 0:
		if problems := platformProblems(target, ref); len(problems) > 0 {
			return "", &SchemaError{Mode: ModePlatform, Problems: problems}
		}
		return ModePlatform, nil
	default:
		if problems := seededProblems(target, ref); len(problems) > 0 {
			return "", &SchemaError{Mode: ModePlatformSeeded, Problems: problems}
		}
		return ModePlatformSeeded, nil
	}
}

// requiredColumns checks the columns the seed's foreign keys reference and
// those kfsdb's queries read: each must exist with the stand-in's type,
// after the seed or, for a column the seed itself changes (tenant_id,
// which it narrows to VARCHAR(255)), before it.
func requiredColumns(target catalog, ref *reference) []string {
	want := map[objKey]bool{}
	for _, k := range ref.fkColumns {
		want[k] = true
	}
	for table, cols := range platformColumnsRead {
		for _, c := range cols {
			want[objKey{"column", table, c}] = true
		}
	}
	var problems []string
	for _, k := range slices.SortedFunc(maps.Keys(want), compareKeys) {
		after, ok := ref.after[k]
		if !ok {
			problems = append(problems, fmt.Sprintf("kfsdb's reference has no column %s.%s (a bug in kfsdb)", k.table, k.name))
			continue
		}
		types := []string{after.typ}
		if before, ok := ref.before[k]; ok && before.typ != after.typ {
			types = append(types, before.typ)
		}
		got, ok := target[k]
		switch {
		case !ok:
			problems = append(problems, fmt.Sprintf("missing column %s.%s (%s)", k.table, k.name, strings.Join(types, " or ")))
		case !slices.Contains(types, got.typ):
			problems = append(problems, fmt.Sprintf("column %s.%s is %s, kfsdb needs %s", k.table, k.name, got.typ, strings.Join(types, " or ")))
		}
	}
	return problems
}

// platformProblems checks the platform's tables before the seed runs on
// them: the columns it needs, the unique indexes its foreign keys need
// (the seed creates them IF NOT EXISTS, so one of the same name must be
// the same index), and no constraint of a name the seed adds (ADD
// CONSTRAINT would fail).
func platformProblems(target catalog, ref *reference) []string {
	problems := requiredColumns(target, ref)
	for _, k := range slices.SortedFunc(maps.Keys(ref.after), compareKeys) {
		if !ref.before.has(k.table) {
			continue // the seed's own tables
		}
		if _, existed := ref.before[k]; existed {
			continue
		}
		switch k.kind {
		case "index":
			gotKey, got, ok := target.indexNamed(k.name)
			if ok && (gotKey.table != k.table || got.def != ref.after[k].def) {
				problems = append(problems, fmt.Sprintf("index %s exists on %s as %q, the seed needs it on %s as %q (it creates it only IF NOT EXISTS)",
					k.name, gotKey.table, got.def, k.table, ref.after[k].def))
			}
		case "constraint":
			if got, ok := target[k]; ok {
				problems = append(problems, fmt.Sprintf("%s already exists (%s): the seed adds it", k, got.def))
			}
		}
	}
	return problems
}

// seededProblems checks a database whose seed another runner applied: the
// seed's tables must be exactly what the seed creates, and what the seed
// adds to or changes in the platform's tables must be there.
func seededProblems(target catalog, ref *reference) []string {
	problems := requiredColumns(target, ref)
	seedTables := ref.seedTables()
	for _, k := range slices.SortedFunc(maps.Keys(ref.after), compareKeys) {
		want := ref.after[k]
		got, ok := target[k]
		if slices.Contains(seedTables, k.table) {
			switch {
			case !ok:
				problems = append(problems, fmt.Sprintf("%s is missing (the seed creates %s)", k, want))
			case got != want:
				problems = append(problems, fmt.Sprintf("%s differs: the seed creates %s, found %s", k, describeDef(k, want), describeDef(k, got)))
			}
			continue
		}
		if before, existed := ref.before[k]; existed && before.typ == want.typ && before.def == want.def {
			continue // not the seed's: the platform's own
		}
		switch {
		case k.kind == "column":
			// Checked by requiredColumns when referenced; a column the
			// seed changes must have its new type.
			if ok && (got.typ != want.typ || got.def != want.def) {
				problems = append(problems, fmt.Sprintf("%s differs: the seed makes it %s, found %s", k, want, got))
			}
		case !ok:
			problems = append(problems, fmt.Sprintf("%s is missing (the seed adds %s)", k, want))
		case got.def != want.def:
			problems = append(problems, fmt.Sprintf("%s differs: the seed adds %s, found %s", k, want, got))
		}
	}
	for _, k := range slices.SortedFunc(maps.Keys(target), compareKeys) {
		if _, ok := ref.after[k]; !ok && slices.Contains(seedTables, k.table) {
			problems = append(problems, fmt.Sprintf("%s is not the seed's: %s", k, target[k]))
		}
	}
	return problems
}
