package cli

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"

	"github.com/knowledgefs/kfsdb/cmd/kfsdb/console"
	"github.com/knowledgefs/kfsdb/migrate/redact"
	"github.com/knowledgefs/kfsdb/repo"
)

// EnvConsoleToken names the environment variable read when --auth-token
// is not given.
const EnvConsoleToken = "KFSDB_CONSOLE_TOKEN"

// ConsoleListenDefault is ConsoleOpts.Listen's default: loopback only.
const ConsoleListenDefault = "127.0.0.1:8080"

// ConsoleOpts are the options of Console.
type ConsoleOpts struct {
	// AuthToken is console.Config.AuthToken. Required when Listen is not
	// a loopback address.
	AuthToken string
	// DatabaseURL is the database shown. Required.
	DatabaseURL string
	// Listen is the address served. Defaults to ConsoleListenDefault.
	Listen string
	// Out receives the console's address and its error log. Required.
	Out io.Writer
	// ReadOnly is console.Config.ReadOnly.
	ReadOnly bool
	// TenantID is console.Config.TenantID: "" shows every tenant.
	TenantID string
	// MetricsListen is a host:port to serve Prometheus metrics on, at
	// /metrics, apart from the console: the console's statement latencies
	// and the backlog gauges. Defaults to "": off.
	MetricsListen string
}

// Validate reports the first missing or invalid field.
func (o *ConsoleOpts) Validate() error {
	if err := validateDatabaseURL(o.DatabaseURL); err != nil {
		return err
	}
	listen := cmp.Or(o.Listen, ConsoleListenDefault)
	if _, _, err := net.SplitHostPort(listen); err != nil {
		return fmt.Errorf("invalid options: Listen %q is not host:port", listen)
	}
	if err := validateMetricsListen(o.MetricsListen); err != nil {
		return err
	}
	switch {
	case o.Out == nil:
		return errors.New("invalid options: Out is required")
	case !console.ListenIsLoopback(listen) && o.AuthToken == "":
		return fmt.Errorf("invalid options: Listen %q is not a loopback address, so an auth token is required (--auth-token or $%s)", listen, EnvConsoleToken)
	case len(o.TenantID) > repo.MaxTenantIDLength:
		return fmt.Errorf("invalid options: TenantID must be at most %d characters", repo.MaxTenantIDLength)
	}
	return nil
}

// Console serves the web console on opts.Listen until ctx ends.
func Console(ctx context.Context, opts *ConsoleOpts) error {
	if err := opts.Validate(); err != nil {
		return err
	}
	if err := serveConsole(ctx, opts); err != nil {
		return errors.New(redact.Text(err.Error(), opts.DatabaseURL))
	}
	return nil
}

func serveConsole(ctx context.Context, opts *ConsoleOpts) error {
	out := &syncWriter{w: opts.Out}
	log := slog.New(slog.NewTextHandler(out, nil))
	pool, _, closeAll, err := openServedPool(ctx, opts.DatabaseURL, 4, opts.MetricsListen, out, log)
	if err != nil {
		return err
	}
	defer closeAll()
	srv, err := console.New(console.Config{AuthToken: opts.AuthToken, DB: pool, ReadOnly: opts.ReadOnly, TenantID: opts.TenantID, Logger: log})
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", cmp.Or(opts.Listen, ConsoleListenDefault))
	if err != nil {
		return fmt.Errorf("listen: %w", err)
	}
	fmt.Fprintf(out, "kfsdb console on http://%s/ (Ctrl-C stops)\n", ln.Addr())
	return console.Serve(ctx, ln, srv.Handler())
}

func runConsole(ctx context.Context, args []string, stdout, stderr io.Writer, getenv func(string) string) error {
	fs := flag.NewFlagSet("kfsdb console", flag.ContinueOnError)
	fs.SetOutput(stderr)
	opts := &ConsoleOpts{Out: stdout}
	fs.StringVar(&opts.DatabaseURL, "database-url", "", "PostgreSQL URL; defaults to $"+EnvDatabaseURL)
	fs.StringVar(&opts.Listen, "listen", ConsoleListenDefault, "address to serve; a non-loopback one needs a token")
	fs.StringVar(&opts.TenantID, "tenant", "", "confine the console to this tenant (default: every tenant)")
	fs.BoolVar(&opts.ReadOnly, "read-only", false, "show no actions and refuse them")
	fs.StringVar(&opts.AuthToken, "auth-token", "", "token every request must carry (Bearer or /login cookie); defaults to $"+EnvConsoleToken)
	fs.StringVar(&opts.MetricsListen, "metrics-listen", "", metricsListenUsage)
	if err := parseCommand(fs, args, "Usage: kfsdb console [--listen 127.0.0.1:8080] [--database-url URL] [--tenant T] [--read-only] [--auth-token TOKEN] [--metrics-listen ADDR]", 0, "console takes no arguments"); err != nil {
		return err
	}
	opts.DatabaseURL = cmp.Or(opts.DatabaseURL, getenv(EnvDatabaseURL))
	opts.AuthToken = cmp.Or(opts.AuthToken, getenv(EnvConsoleToken))
	if err := opts.Validate(); err != nil {
		return fmt.Errorf("%w: %w", ErrUsage, err)
	}
	return Console(ctx, opts)
}
