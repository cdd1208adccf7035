// Package migrations holds integration tests for kfsdb's goose migrations
// (db/migrations): up/down round trips, idempotence, concurrent runs, the
// 0006 preflight check, and catalog equality with the seed SQL as the
// platform applies it (taken from the repository's own 00006, so the tests
// need only the repository).
package migrations
