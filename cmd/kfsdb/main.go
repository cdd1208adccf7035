// Command kfsdb is the binary operators deploy: it manages kfsdb's
// PostgreSQL schema (kfsdb migrate) and offers operator commands (kfsdb
// relay, purge, work) and a lifecycle load driver (kfsdb bench), all on the
// database a URL names. It links no test harness; the demo is
// tests/cmd/kfsdb-demo (`make demo`). See `kfsdb -h`.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/knowledgefs/kfsdb/cmd/kfsdb/cli"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := cli.Main(ctx, os.Args[1:], os.Stdout, os.Stderr, os.Getenv)
	stop()
	os.Exit(code)
}
