// Command kfsdb manages kfsdb's PostgreSQL schema (kfsdb migrate), runs the
// compilation lifecycle end to end on a throwaway database (kfsdb demo), and
// offers operator commands (kfsdb relay, kfsdb purge, kfsdb work). See `kfsdb -h`.
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
