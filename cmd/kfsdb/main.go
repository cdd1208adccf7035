// Command kfsdb is the binary operators deploy against a production
// database: it manages kfsdb's PostgreSQL schema (kfsdb migrate), inspects
// attempts and the outbox (attempts, outbox, stuck, console) and acts on
// attempts only through the guarded transitions (attempts
// cancel|retry|supersede|release, the table in cmd/kfsdb/ops/actions.go;
// purge), all on the database a URL names. It runs
// no handler and publishes nothing: work, relay and bench are kfsdb-bench's
// (bench/kfsdb-bench), the demo is tests/cmd/kfsdb-demo (`make demo`). See
// `kfsdb -h`.
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
