// Command kfsdb-bench is kfsdb's bench and demo binary: `kfsdb-bench work`
// runs workers with a stand-in handler on a database's attempts,
// `kfsdb-bench relay` publishes its outbox to stdout or NATS, and
// `kfsdb-bench bench` runs the lifecycle load driver on a scratch database
// of a server. None of them belongs on a production database, so they are
// not in the deploy binary (cmd/kfsdb). See `kfsdb-bench -h`.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/knowledgefs/kfsdb/bench/kfsdb-bench/benchcli"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := benchcli.Main(ctx, os.Args[1:], os.Stdout, os.Stderr, os.Getenv)
	stop()
	os.Exit(code)
}
