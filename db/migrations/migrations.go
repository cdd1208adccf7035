// Package migrations embeds kfsdb's goose SQL migrations.
//
// Programs apply them with goose's Provider over [FS] (see cmd/kfsdb
// migrate), or with the goose CLI pointed at this directory; both give the
// same schema. Version 5 is absent on purpose: upstream's 0005 changes
// nothing that 0006 depends on.
package migrations

import "embed"

// FS holds the migration files, named NNNNN_name.sql, at its root.
//
//go:embed *.sql
var FS embed.FS
