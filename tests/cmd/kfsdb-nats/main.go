// Command kfsdb-nats runs a NATS server with JetStream in-process on
// 127.0.0.1 (tests/natstest), its store in a temporary directory, until
// SIGINT or SIGTERM; then it stops the server and removes the store. It
// prints the server's URL on its first line of output, for bench scripts:
//
//	kfsdb-nats >nats.log & pid=$!
//	until url=$(head -n 1 nats.log) && [ -n "$url" ]; do sleep 0.1; done
//	kfsdb-bench bench --delivery nats --nats-url "$url" …
//	kill $pid
//
// kfsdb-bench links no NATS server: outside benches, run a real one
// (nats-server -js).
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/knowledgefs/kfsdb/tests/natstest"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// run serves until ctx ends and returns the exit status: 2 for bad flags,
// 1 if the server cannot start or its store cannot be removed.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("kfsdb-nats", flag.ContinueOnError)
	fs.SetOutput(stderr)
	port := fs.Int("port", 0, "client port on 127.0.0.1 (default: a free one)")
	if err := fs.Parse(args); err != nil {
		if err == flag.ErrHelp {
			return 0
		}
		return 2
	}
	if fs.NArg() != 0 {
		fmt.Fprintln(stderr, "kfsdb-nats: takes no arguments")
		return 2
	}
	dir, err := os.MkdirTemp("", "kfsdb-nats-")
	if err != nil {
		fmt.Fprintf(stderr, "kfsdb-nats: %v\n", err)
		return 1
	}
	code := serve(ctx, dir, *port, stdout, stderr)
	if err := os.RemoveAll(dir); err != nil {
		fmt.Fprintf(stderr, "kfsdb-nats: remove store: %v\n", err)
		code = max(code, 1)
	}
	return code
}

func serve(ctx context.Context, dir string, port int, stdout, stderr io.Writer) int {
	n, err := natstest.StartNodeAt(dir, port)
	if err != nil {
		fmt.Fprintf(stderr, "kfsdb-nats: %v\n", err)
		return 1
	}
	fmt.Fprintln(stdout, n.URL)
	fmt.Fprintf(stdout, "kfsdb-nats: JetStream server on %s, store %s; SIGTERM or Ctrl-C stops it\n", n.URL, dir)
	<-ctx.Done()
	n.Shutdown()
	fmt.Fprintln(stdout, "kfsdb-nats: stopped")
	return 0
}
