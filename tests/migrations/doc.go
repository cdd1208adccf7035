// Package migrations holds integration tests for kfsdb's goose migrations
// (db/migrations): up/down round trips, idempotence, concurrent runs, the
// 0006 preflight check, and catalog equality with the user's seed SQL.
package migrations
