package migrate

// The catalog kfsdb compares: one schema's tables, columns, constraints,
// indexes and triggers, read from pg_catalog in a form that is the same
// for the same object in any schema (mode.go classifies a database by it).

import (
	"context"
	"database/sql"
	"fmt"
	"slices"
	"strings"
)

// catalogQuery describes the tables of one schema (%s is an expression for
// its pg_namespace oid), one row per table, column, constraint, index and
// trigger: kind, table, name, position (columns: the ordinal among the
// live columns), type (columns) and a definition that is the same for the
// same object in any schema. Constraint definitions name other tables
// unqualified because the schema described is the first in search_path;
// index definitions are cut to the part after the table's name.
const catalogQuery = `
WITH rels AS (
  SELECT c.oid, c.relname, c.relkind
    FROM pg_class c
   WHERE c.relnamespace = %s AND c.relkind IN ('r', 'p')
)
SELECT 'table', r.relname, '', 0, '', 'kind=' || r.relkind::text
  FROM rels r
UNION ALL
SELECT 'column', r.relname, a.attname,
       row_number() OVER (PARTITION BY a.attrelid ORDER BY a.attnum),
       format_type(a.atttypid, a.atttypmod),
       format('notnull=%%s default=%%s collation=%%s identity=%%s generated=%%s',
              a.attnotnull, coalesce(pg_get_expr(d.adbin, d.adrelid), '-'),
              coalesce(coll.collname, '-'), a.attidentity, a.attgenerated)
  FROM rels r
  JOIN pg_attribute a ON a.attrelid = r.oid
  LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
  LEFT JOIN pg_collation coll ON coll.oid = a.attcollation
 WHERE a.attnum > 0 AND NOT a.attisdropped
UNION ALL
SELECT 'constraint', r.relname, con.conname, 0, '',
       format('type=%%s deferrable=%%s deferred=%%s validated=%%s %%s',
              con.contype, con.condeferrable, con.condeferred, con.convalidated,
              pg_get_constraintdef(con.oid))
  FROM rels r
  JOIN pg_constraint con ON con.conrelid = r.oid
UNION ALL
SELECT 'index', r.relname, ic.relname, 0, '',
       format('unique=%%s primary=%%s valid=%%s%%s', i.indisunique, i.indisprimary, i.indisvalid,
              substring(pg_get_indexdef(i.indexrelid) FROM ' USING .*$'))
  FROM rels r
  JOIN pg_index i ON i.indrelid = r.oid
  JOIN pg_class ic ON ic.oid = i.indexrelid
UNION ALL
SELECT 'trigger', r.relname, t.tgname, 0, '', pg_get_triggerdef(t.oid)
  FROM rels r
  JOIN pg_trigger t ON t.tgrelid = r.oid
 WHERE NOT t.tgisinternal
`

// The schema kfsdb migrates (the connection's current schema, where goose
// creates tables too) and the session's temporary schema.
const (
	currentSchemaOID = `(SELECT oid FROM pg_namespace WHERE nspname = current_schema())`
	tempSchemaOID    = `pg_my_temp_schema()`
)

type objKey struct{ kind, table, name string }

type objDef struct {
	pos int
	typ string
	def string
}

func (k objKey) String() string {
	if k.kind == "table" {
		return "table " + k.table
	}
	return k.table + ": " + k.kind + " " + k.name
}

func (d objDef) String() string {
	if d.typ == "" {
		return d.def
	}
	return d.typ + " " + d.def
}

type catalog map[objKey]objDef

func (c catalog) tables() []string {
	var out []string
	for k := range c {
		if k.kind == "table" {
			out = append(out, k.table)
		}
	}
	slices.Sort(out)
	return out
}

func (c catalog) has(table string) bool {
	_, ok := c[objKey{"table", table, ""}]
	return ok
}

// indexNamed finds an index by name in any table (index names are unique
// in a schema).
func (c catalog) indexNamed(name string) (objKey, objDef, bool) {
	return c.named("index", name)
}

// named finds an object of kind by name in any table; for a table, its
// own row.
func (c catalog) named(kind, name string) (objKey, objDef, bool) {
	for k, d := range c {
		if k.kind == kind && (k.name == name || (kind == "table" && k.table == name)) {
			return k, d, true
		}
	}
	return objKey{}, objDef{}, false
}

// queryer is what describe and detect need of a *sql.Tx or *sql.Conn.
type queryer interface {
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
}

func describe(ctx context.Context, q queryer, schemaOID string) (catalog, error) {
	rows, err := q.QueryContext(ctx, fmt.Sprintf(catalogQuery, schemaOID))
	if err != nil {
		return nil, fmt.Errorf("could not read the catalog: %w", err)
	}
	defer func() { _ = rows.Close() }()
	c := catalog{}
	for rows.Next() {
		var k objKey
		var d objDef
		if err := rows.Scan(&k.kind, &k.table, &k.name, &d.pos, &d.typ, &d.def); err != nil {
			return nil, fmt.Errorf("could not read the catalog: %w", err)
		}
		c[k] = d
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("could not read the catalog: %w", err)
	}
	return c, nil
}

func describeDef(k objKey, d objDef) string {
	if k.kind == "column" {
		return fmt.Sprintf("#%d %s", d.pos, d)
	}
	return d.String()
}

func compareKeys(a, b objKey) int {
	return strings.Compare(a.table+"\x00"+a.kind+"\x00"+a.name, b.table+"\x00"+b.kind+"\x00"+b.name)
}
