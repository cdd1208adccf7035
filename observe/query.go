package observe

import "strings"

// OtherQuery is QueryName's answer for SQL without a valid sqlc header.
const OtherQuery = "other"

// maxQueryNameLength bounds a query name taken from SQL text.
const maxQueryNameLength = 64

// QueryName returns X of SQL that starts with the sqlc header
// "-- name: X :kind", or OtherQuery: for SQL without it, and for a name
// that is not an identifier of at most 64 characters, so that metric
// labels and span names taken from it stay bounded by the program's
// queries. The adapters (adapters/prom, adapters/otel) name statements by
// it.
func QueryName(sql string) string {
	rest, ok := strings.CutPrefix(strings.TrimLeft(sql, " \t\r\n"), "-- name: ")
	if !ok {
		return OtherQuery
	}
	name, _, _ := strings.Cut(rest, " ")
	if name == "" || len(name) > maxQueryNameLength {
		return OtherQuery
	}
	for i, r := range name {
		switch {
		case r >= 'A' && r <= 'Z', r >= 'a' && r <= 'z', r == '_':
		case r >= '0' && r <= '9' && i > 0:
		default:
			return OtherQuery
		}
	}
	return name
}
