// Package bench holds kfsdb's benchmarks: every single-attempt transition
// and the relay's batch path, each run through repo.Repo (impl=repo) and as
// the very same SQL text and arguments sent by a bare pgx loop (impl=raw),
// plus pgbench's single-row UPDATE as the server's reference, all in one
// run on one server. `make bench` runs them and prints the ratios.
//
// The benchmarks use the server in KFS_BENCH_DATABASE_URL when it is set
// (they create and drop a kfsbench_* database there), otherwise
// pgtest.StartServer (KFS_TEST_DATABASE_URL or a container; note that
// pgtest's containers run with fsync off on tmpfs, so use
// KFS_BENCH_DATABASE_URL on an fsync-on server for figures comparable with
// production). Nothing starts unless -bench is given or KFS_LOADGEN=1, so
// `go test ./...` stays fast.
//
// TestLoadgen (KFS_LOADGEN=1) runs the lifecycle load driver of package
// loadgen against the same server. TestStartFloor (KFS_START_FLOOR=1, `make
// bench-start`) compares repo.Start with its pgbench floor on a server of
// its own (fsync on, Docker volume). TestAgeing (KFS_AGEING=1, `make
// bench-ageing`) measures the hot and operator statements as terminal
// history grows to 10^7 attempts, on a server of its own likewise.
package bench
