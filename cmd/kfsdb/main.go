// Command kfsdb manages kfsdb's PostgreSQL schema (kfsdb migrate) and runs a
// throwaway demonstration (kfsdb demo). See `kfsdb -h`.
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
