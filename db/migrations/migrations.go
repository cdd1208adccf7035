// Package migrations embeds kfsdb's goose SQL migrations: 00001-00004 are
// kfsdb's stand-ins for the platform's tables, 00006 is the seed (the
// platform's migration 0006, verbatim), 00007 onwards are kfsdb's own.
//
// Apply them with the migrate module (github.com/knowledgefs/kfsdb/migrate,
// or `kfsdb migrate`): it records them in kfsdb_db_version, never an
// application's goose_db_version, and skips the stand-ins, or the seed too,
// where the platform created those tables. A tool of another kind gets
// their SQL from `kfsdb migrate sql`. Running the goose CLI on this
// directory directly would apply the stand-ins on the platform's tables.
// Version 5 is absent on purpose: upstream's 0005 changes nothing that 0006
// depends on.
package migrations

import "embed"

// FS holds the migration files, named NNNNN_name.sql, at its root.
//
//go:embed *.sql
var FS embed.FS
