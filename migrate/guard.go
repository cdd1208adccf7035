package migrate

import (
	"fmt"
	"regexp"
	"strings"
)

// What kfsdb runs and prints in place of a Down section's DROP TABLE: the
// same DROP, guarded so that it refuses a table that holds rows. The
// migration files stay as written (0006 is the platform's seed, applied
// verbatim); the guard is put in when a Down section is parsed, and both
// [SQL]'s down export and [Provider]'s Down and DownTo run the guarded
// text.

// refusedDropCode is the SQLSTATE a guard raises when its table holds rows
// (class KF: kfsdb's own). [Provider.Down] turns it into a *[DataLossError].
const refusedDropCode = "KF001"

// guardableDrop is the one form of DROP TABLE a guard can stand in for:
// one table of a plain name, quoted or not, IF EXISTS or not, without
// CASCADE, alone on its line or lines.
var guardableDrop = regexp.MustCompile(`^(?i:DROP\s+TABLE\s+(IF\s+EXISTS\s+)?)("[a-z_][a-z0-9_]*"|[A-Za-z_][A-Za-z0-9_]*)\s*;$`)

// guardableColumnDrop is the one form of DROP COLUMN a guard can stand in
// for: one column of one table, both of plain names, quoted or not, IF
// EXISTS or not, without CASCADE, alone on its line or lines.
var guardableColumnDrop = regexp.MustCompile(`^(?i:ALTER\s+TABLE\s+)("[a-z_][a-z0-9_]*"|[A-Za-z_][A-Za-z0-9_]*)\s+(?i:DROP\s+COLUMN\s+(IF\s+EXISTS\s+)?)("[a-z_][a-z0-9_]*"|[A-Za-z_][A-Za-z0-9_]*)\s*;$`)

// losesRows matches the statements that remove a table, its rows or a
// column's values. In a Down section any of them other than a guardable
// DROP TABLE or DROP COLUMN is refused: kfsdb cannot guard it.
var losesRows = regexp.MustCompile(`(?i)\b(DROP\s+TABLE|TRUNCATE|DELETE\s+FROM|DROP\s+COLUMN|DROP\s+SCHEMA|DROP\s+OWNED|DROP\s+DATABASE)\b`)

// alterDrops finds each DROP of an ALTER TABLE and the word after it.
var (
	alterTable = regexp.MustCompile(`(?i)\bALTER\s+TABLE\b`)
	alterDrops = regexp.MustCompile(`(?i)\bDROP\s+("[^"]*"|\w+)`)
)

// dropsColumn reports whether text, a statement, is an ALTER TABLE that
// drops a column: DROP COLUMN, or DROP followed by the column's name (the
// word COLUMN is optional), rather than one of the other DROPs of ALTER
// TABLE (a constraint, a default, NOT NULL, a generation expression, an
// identity), which lose no value.
func dropsColumn(text string) bool {
	if !alterTable.MatchString(text) {
		return false
	}
	for _, m := range alterDrops.FindAllStringSubmatch(withoutComments(text), -1) {
		switch strings.ToUpper(m[1]) {
		case "CONSTRAINT", "DEFAULT", "NOT", "EXPRESSION", "IDENTITY":
		default:
			return true
		}
	}
	return false
}

// UnguardedDropError is returned by [SQL] and [NewProvider] when a
// migration's Down section holds a statement that could remove a table or
// rows and that kfsdb cannot guard: a DROP TABLE of several tables, with
// CASCADE or inside a StatementBegin/End block, a TRUNCATE, a DELETE, a
// DROP COLUMN of another form, a DROP SCHEMA. Only `DROP TABLE [IF EXISTS]
// "name";` and `ALTER TABLE "name" DROP COLUMN [IF EXISTS] "column";` are
// guarded.
type UnguardedDropError struct {
	Migration string // the file name
	Statement string // the statement, as written
}

func (e *UnguardedDropError) Error() string {
	return fmt.Sprintf("migration %s: its Down holds a statement that could lose rows and that kfsdb cannot guard "+
		"(only `DROP TABLE [IF EXISTS] \"name\";` and `ALTER TABLE \"name\" DROP COLUMN [IF EXISTS] \"column\";` are): %s",
		e.Migration, e.Statement)
}

// guardDown returns the Down section down of migration name with each DROP
// TABLE replaced by its guard, and the tables those drop, in order. It
// splits statements as goose does: a StatementBegin/End block is one
// statement, any other ends at a line whose last word before a "--" ends
// with ";"; comments and blank lines between statements are kept as they
// are.
func guardDown(name, down string) (string, []string, error) {
	var out strings.Builder
	var tables, stmt []string
	block := false
	emit := func() error {
		text := strings.Join(stmt, "\n")
		stmt = nil
		if !block {
			if m := guardableDrop.FindStringSubmatch(withoutComments(text)); m != nil {
				table := plainName(m[2])
				tables = append(tables, table)
				out.WriteString(dropGuard(name, table, text, m[1] != ""))
				return nil
			}
			if m := guardableColumnDrop.FindStringSubmatch(withoutComments(text)); m != nil {
				out.WriteString(columnDropGuard(name, plainName(m[1]), plainName(m[3]), text, m[2] != ""))
				return nil
			}
		}
		if losesRows.MatchString(text) || dropsColumn(text) {
			return &UnguardedDropError{Migration: name, Statement: text}
		}
		out.WriteString(text)
		out.WriteByte('\n')
		return nil
	}
	for line := range strings.Lines(down) {
		line = strings.TrimSuffix(line, "\n")
		switch annotation, _ := gooseAnnotation(line); annotation {
		case "StatementBegin":
			block = true
			stmt = append(stmt, line)
			continue
		case "StatementEnd":
			stmt = append(stmt, line)
			if err := emit(); err != nil {
				return "", nil, err
			}
			block = false
			continue
		}
		if trimmed := strings.TrimSpace(line); len(stmt) == 0 && (trimmed == "" || strings.HasPrefix(trimmed, "--")) {
			out.WriteString(line)
			out.WriteByte('\n')
			continue
		}
		stmt = append(stmt, line)
		if !block && endsWithSemicolon(line) {
			if err := emit(); err != nil {
				return "", nil, err
			}
		}
	}
	if len(stmt) > 0 { // unterminated: goose refuses it when it runs
		if err := emit(); err != nil {
			return "", nil, err
		}
	}
	return strings.TrimSpace(out.String()), tables, nil
}

// gooseAnnotation returns the annotation of a "-- +goose X" line.
func gooseAnnotation(line string) (string, bool) {
	annotation, ok := strings.CutPrefix(strings.TrimSpace(line), "-- +goose ")
	return strings.TrimSpace(annotation), ok
}

// endsWithSemicolon is goose's test for the end of a statement: the last
// word before any "--" ends with ";".
func endsWithSemicolon(line string) bool {
	prev := ""
	for word := range strings.FieldsSeq(line) {
		if strings.HasPrefix(word, "--") {
			break
		}
		prev = word
	}
	return strings.HasSuffix(prev, ";")
}

// withoutComments is statement text without its "--" comment lines and
// with its words joined by single spaces.
func withoutComments(text string) string {
	var words []string
	for line := range strings.Lines(text) {
		if !strings.HasPrefix(strings.TrimSpace(line), "--") {
			words = append(words, strings.Fields(line)...)
		}
	}
	return strings.Join(words, " ")
}

// dropGuard is drop, the DROP TABLE of table in migration name, as one
// statement that locks the table before it reads it, refuses (raises
// SQLSTATE KF001, naming the table) if it holds a row, and only then runs
// drop. Lock, check and drop are one statement, so they are one
// transaction even where each statement commits on its own (psql without
// -1); and nothing can insert into the table between the check and the
// drop: a transaction that inserted before the lock has committed (the
// lock waited for it) or rolled back, and the check reads after the lock
// (PL/pgSQL takes a new snapshot for each statement under READ
// COMMITTED). Under REPEATABLE READ or SERIALIZABLE the check would read
// the transaction's first snapshot, which may predate the lock, so the
// guard refuses to run there. With IF EXISTS a missing table is left
// alone, as the DROP would.
func dropGuard(name, table, drop string, ifExists bool) string {
	g := guard{what: "table " + table, table: table, comment: "locks the table, refuses if it holds rows, then drops it",
		found: "rows", holds: "it holds rows", check: fmt.Sprintf("SELECT 1 FROM %q", table), names: fmt.Sprintf("TABLE = '%s'", table),
		hint: "Keep the table. If its rows are truly not needed, delete them first and run the migration again."}
	if ifExists {
		g.missing = fmt.Sprintf("to_regclass('%q') IS NULL", table)
	}
	return g.text(name, drop)
}

// plainName is an identifier as PostgreSQL stores it: a quoted one as
// written, an unquoted one folded to lower case.
func plainName(ident string) string {
	if strings.HasPrefix(ident, `"`) {
		return strings.Trim(ident, `"`)
	}
	return strings.ToLower(ident)
}

// columnDropGuard is drop, the DROP COLUMN of column of table in migration
// name, as one statement that locks the table before it reads it, refuses
// (raises SQLSTATE KF001, naming the table and the column) if any row
// holds a value in the column (one that is not NULL), and only then runs
// drop: dropGuard's discipline, for a column. A migration that adds
// columns keeps "no value" as NULL, so that its Down loses nothing when
// this guard lets it through. With IF EXISTS a missing table or column is
// left alone, as the DROP would.
func columnDropGuard(name, table, column, drop string, ifExists bool) string {
	g := guard{what: "column " + column + " of table " + table, table: table,
		comment: "locks the table, refuses if the column holds a value, then drops it", found: "values", holds: "it holds values",
		check: fmt.Sprintf("SELECT 1 FROM %q WHERE %q IS NOT NULL", table, column), names: fmt.Sprintf("TABLE = '%s', COLUMN = '%s'", table, column),
		hint: "Keep the column. If its values are truly not needed, clear them first and run the migration again."}
	if ifExists {
		g.missing = fmt.Sprintf(`NOT EXISTS (SELECT 1 FROM pg_catalog.pg_attribute a
                  WHERE a.attrelid = to_regclass('%q') AND a.attname = '%s' AND NOT a.attisdropped)`, table, column)
	}
	return g.text(name, drop)
}

// guard is what a drop's guard says and checks.
type guard struct {
	// what is dropped ("table t", "column c of table t"), in messages;
	// table is locked; comment heads the guard.
	what, table, comment string
	// missing, when set, is the condition under which the guard does
	// nothing (IF EXISTS: the object is not there).
	missing string
	// found is what the check looks for ("rows"), holds what the refusal
	// says ("it holds rows"); check is the query that finds it; names are
	// the RAISE's object fields.
	found, holds, check, names string
	hint                       string
}

// text is the guard of drop in migration name: one DO statement that
// locks the table, refuses (SQLSTATE KF001) when check finds something,
// then runs drop.
func (g guard) text(name, drop string) string {
	var b strings.Builder
	b.WriteString("-- +goose StatementBegin\n")
	fmt.Fprintf(&b, "-- kfsdb's guard: %s.\n", g.comment)
	b.WriteString("DO $kfsdb_guard$\nBEGIN\n")
	if g.missing != "" {
		fmt.Fprintf(&b, "  IF %s THEN\n    RETURN;\n  END IF;\n", g.missing)
	}
	fmt.Fprintf(&b, `  IF current_setting('transaction_isolation') <> 'read committed' THEN
    RAISE EXCEPTION USING ERRCODE = '25000',
      MESSAGE = 'kfsdb refuses to drop %[1]s outside READ COMMITTED isolation (this transaction is '
        || current_setting('transaction_isolation') || ')',
      DETAIL = 'Its check for %[2]s would read a snapshot taken before the table was locked.',
      HINT = 'Run the migration in a READ COMMITTED transaction.';
  END IF;
  LOCK TABLE %[3]q IN ACCESS EXCLUSIVE MODE;
  IF EXISTS (%[4]s) THEN
    RAISE EXCEPTION USING ERRCODE = '%[5]s', %[6]s,
      MESSAGE = 'kfsdb refuses to drop %[1]s: %[7]s',
      DETAIL = 'The Down of kfsdb migration %[8]s drops it. Nothing was dropped.',
      HINT = '%[9]s';
  END IF;
`, g.what, g.found, g.table, g.check, refusedDropCode, g.names, g.holds, name, g.hint)
	for line := range strings.Lines(drop) {
		b.WriteString("  ")
		b.WriteString(strings.TrimSpace(line))
		b.WriteByte('\n')
	}
	b.WriteString("END\n$kfsdb_guard$;\n-- +goose StatementEnd\n")
	return b.String()
}
