//go:build !race

package multiproc_test

// raceEnabled builds the kfsdb-bench binary with -race when the test runs with it.
const raceEnabled = false
