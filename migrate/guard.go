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

// losesRows matches the statements that remove a table, its rows or a
// column's values. In a Down section any of them other than a guardable
// DROP TABLE is refused: kfsdb cannot guard it.
var losesRows = regexp.MustCompile(`(?i)\b(DROP\s+TABLE|TRUNCATE|DELETE\s+FROM|DROP\s+COLUMN|DROP\s+SCHEMA|DROP\s+OWNED|DROP\s+DATABASE)\b`)

// UnguardedDropError is returned by [SQL] and [NewProvider] when a
// migration's Down section holds a statement that could remove a table or
// rows and that kfsdb cannot guard: a DROP TABLE of several tables, with
// CASCADE or inside a StatementBegin/End block, a TRUNCATE, a DELETE, a
// DROP COLUMN or SCHEMA. Only `DROP TABLE [IF EXISTS] "name";` is guarded.
type UnguardedDropError struct {
	Migration string // the file name
	Statement string // the statement, as written
}

func (e *UnguardedDropError) Error() string {
	return fmt.Sprintf("migration %s: its Down holds a statement that could lose rows and that kfsdb cannot guard (only `DROP TABLE [IF EXISTS] \"name\";` is): %s",
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
				table := strings.Trim(m[2], `"`)
				if !strings.HasPrefix(m[2], `"`) {
					table = strings.ToLower(table)
				}
				tables = append(tables, table)
				out.WriteString(dropGuard(name, table, text, m[1] != ""))
				return nil
			}
		}
		if losesRows.MatchString(text) {
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
	var b strings.Builder
	b.WriteString("-- +goose StatementBegin\n")
	b.WriteString("-- kfsdb's guard: locks the table, refuses if it holds rows, then drops it.\n")
	b.WriteString("DO $kfsdb_guard$\nBEGIN\n")
	if ifExists {
		fmt.Fprintf(&b, "  IF to_regclass('%q') IS NULL THEN\n    RETURN;\n  END IF;\n", table)
	}
	fmt.Fprintf(&b, `  IF current_setting('transaction_isolation') <> 'read committed' THEN
    RAISE EXCEPTION USING ERRCODE = '25000',
      MESSAGE = 'kfsdb refuses to drop table %[1]s outside READ COMMITTED isolation (this transaction is '
        || current_setting('transaction_isolation') || ')',
      DETAIL = 'Its check for rows would read a snapshot taken before the table was locked.',
      HINT = 'Run the migration in a READ COMMITTED transaction.';
  END IF;
  LOCK TABLE %[1]q IN ACCESS EXCLUSIVE MODE;
  IF EXISTS (SELECT 1 FROM %[1]q) THEN
    RAISE EXCEPTION USING ERRCODE = '%[2]s', TABLE = '%[1]s',
      MESSAGE = 'kfsdb refuses to drop table %[1]s: it holds rows',
      DETAIL = 'The Down of kfsdb migration %[3]s drops it. Nothing was dropped.',
      HINT = 'Keep the table. If its rows are truly not needed, delete them first and run the migration again.';
  END IF;
`, table, refusedDropCode, name)
	for line := range strings.Lines(drop) {
		b.WriteString("  ")
		b.WriteString(strings.TrimSpace(line))
		b.WriteByte('\n')
	}
	b.WriteString("END\n$kfsdb_guard$;\n-- +goose StatementEnd\n")
	return b.String()
}
