// Command kfsdb-bench runs `kfsdb-bench bench` (bench/kfsdb-bench) on a
// throwaway PostgreSQL server that the test harness starts (tests/pgtest:
// the server in KFS_TEST_DATABASE_URL, else a container of
// KFS_TEST_POSTGRES_IMAGE) and removes afterwards. It takes the bench
// command's flags and prints its output; `make bench-kfsdb` runs it. The
// kfsdb-bench binary starts no server: it needs --database-url.
package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"slices"
	"syscall"

	"github.com/knowledgefs/kfsdb/bench/kfsdb-bench/benchcli"
	"github.com/knowledgefs/kfsdb/cmd/kfsdb/cmdkit"
	"github.com/knowledgefs/kfsdb/migrate/redact"
	"github.com/knowledgefs/kfsdb/tests/pgtest"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr, os.Getenv)
	stop()
	os.Exit(code)
}

// run starts the server, runs `kfsdb-bench bench args…` on it and returns
// its exit status; 1 if the server cannot be started or removed. Help (-h)
// needs no server.
func run(ctx context.Context, args []string, stdout, stderr io.Writer, getenv func(string) string) int {
	bench := append([]string{"bench"}, args...)
	if slices.ContainsFunc(args, func(a string) bool { return a == "-h" || a == "--help" }) {
		return benchcli.Main(ctx, bench, stdout, stderr, getenv)
	}
	fmt.Fprintln(stdout, "== starting a throwaway PostgreSQL server for kfsdb bench")
	srv, err := pgtest.StartServer(ctx)
	if err != nil {
		fmt.Fprintf(stderr, "kfsdb-bench: %s\n", redact.Text(err.Error()))
		return 1
	}
	fmt.Fprintf(stdout, "throwaway server: %s\n", srv.Description())
	// The throwaway server is $DATABASE_URL, never on a command line:
	// --database-url or --database-url-file in args wins over it.
	serverEnv := func(k string) string {
		if k == cmdkit.EnvDatabaseURL {
			return srv.AdminURL()
		}
		return getenv(k)
	}
	code := benchcli.Main(ctx, bench, stdout, stderr, serverEnv)
	if err := srv.Close(); err != nil {
		fmt.Fprintf(stderr, "kfsdb-bench: %s\n", redact.Text(err.Error()))
		code = max(code, 1)
	}
	return code
}
