package cli

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/spf13/cobra"

	"github.com/knowledgefs/kfsdb/cmd/kfsdb/cmdkit"
	"github.com/knowledgefs/kfsdb/cmd/kfsdb/console"
	"github.com/knowledgefs/kfsdb/cmd/kfsdb/httpguard"
	"github.com/knowledgefs/kfsdb/cmd/kfsdb/ops"
	"github.com/knowledgefs/kfsdb/repo"
)

// EnvConsoleToken names the environment variable read when
// --auth-token-file is not given.
const EnvConsoleToken = "KFSDB_CONSOLE_TOKEN"

// consoleQueryTimeout is the console pool's statement_timeout, and the
// console's time limit for a whole request.
const consoleQueryTimeout = 5 * time.Second

// ConsoleListenDefault is ConsoleOpts.Listen's default: loopback only.
const ConsoleListenDefault = "127.0.0.1:8080"

// ConsoleOpts are the options of Console.
type ConsoleOpts struct {
	// AuthToken is console.Config.AuthToken, read from --auth-token-file
	// or $KFSDB_CONSOLE_TOKEN (never from argv). Required when Listen is
	// not a loopback address; without it the console makes its own and
	// prints a one-time login link. It never opens /metrics, which takes
	// only the metrics token ($KFSDB_METRICS_TOKEN_FILE or
	// $KFSDB_METRICS_TOKEN), else answers loopback only.
	AuthToken string
	// DatabaseURL is the database shown. Required.
	DatabaseURL string
	// Listen is the address served. Defaults to ConsoleListenDefault.
	Listen string
	// Out receives the console's address and its error log. Required.
	Out io.Writer
	// ReadOnly is console.Config.ReadOnly.
	ReadOnly bool
	// TenantID is console.Config.TenantID: "" shows every tenant. It
	// confines /metrics too. The database role must be confined to it
	// (CheckConfinement), and with "" must not be confined.
	TenantID string
	// TrustedProxies is console.Config.TrustedProxies.
	TrustedProxies []netip.Prefix
	// Audit receives the audit lines too, beside Out (the --audit-file
	// and --audit-syslog). Defaults to nil: Out only.
	Audit io.Writer
	// BulkMax is console.Config.BulkMax: the most attempts one bulk
	// action may match. Defaults to ops.BulkMaxDefault.
	BulkMax int
	// MetricsListen is a host:port to serve Prometheus metrics on, at
	// /metrics, apart from the console: the console's statement latencies
	// and the backlog gauges. Defaults to "": off.
	MetricsListen string
}

// Validate reports the first missing or invalid field.
func (o *ConsoleOpts) Validate() error {
	if err := ValidateDatabaseURL(o.DatabaseURL); err != nil {
		return err
	}
	listen := cmp.Or(o.Listen, ConsoleListenDefault)
	if _, _, err := net.SplitHostPort(listen); err != nil {
		return fmt.Errorf("invalid options: Listen %q is not host:port", listen)
	}
	if err := ValidateMetricsListen(o.MetricsListen); err != nil {
		return err
	}
	switch {
	case o.Out == nil:
		return errors.New("invalid options: Out is required")
	case !httpguard.ListenIsLoopback(listen) && o.AuthToken == "":
		return fmt.Errorf("invalid options: Listen %q is not a loopback address, so an auth token is required (--auth-token-file or $%s)", listen, EnvConsoleToken)
	case len(o.TenantID) > repo.MaxTenantIDLength:
		return fmt.Errorf("invalid options: TenantID must be at most %d characters", repo.MaxTenantIDLength)
	case o.BulkMax < 0 || o.BulkMax > ops.MaxBulkMax:
		return fmt.Errorf("invalid options: BulkMax must be 1..%d (--bulk-max)", ops.MaxBulkMax)
	}
	if o.AuthToken != "" {
		if err := httpguard.CheckToken(o.AuthToken); err != nil {
			return fmt.Errorf("invalid options: AuthToken: %w", err)
		}
	}
	return nil
}

// Console serves the web console on opts.Listen until ctx ends.
func Console(ctx context.Context, opts *ConsoleOpts) error {
	if err := opts.Validate(); err != nil {
		return err
	}
	out := cmdkit.NewSyncWriter(opts.Out)
	log := slog.New(slog.NewTextHandler(out, nil))
	// /metrics takes its own token, never the console's (whoever scrapes
	// must not be able to act), or else answers loopback only; a confined
	// console's counts only its tenant. Wrong tokens at either are counted
	// by one throttle.
	throttle := httpguard.NewThrottle(nil)
	ms := metricsServe{Addr: opts.MetricsListen, TenantID: opts.TenantID, Throttle: throttle}
	if ms.Addr != "" {
		var err error
		if ms.Token, err = metricsToken(); err != nil {
			return err
		}
		if ms.Token != "" && ms.Token == opts.AuthToken {
			return fmt.Errorf("invalid options: the metrics token is the console's token: give /metrics its own, so that whoever scrapes cannot act")
		}
	}
	// Every statement is bounded by the server too, in case a request's
	// deadline is not seen (a statement between two checks). Every
	// connection's role is checked before it serves: a confined console's
	// must be one that row-level security confines to its tenant
	// (db/roles/console_roles.sql), an unconfined console's must not be.
	tune := func(cfg *pgxpool.Config) {
		cfg.ConnConfig.RuntimeParams["statement_timeout"] = strconv.FormatInt(consoleQueryTimeout.Milliseconds(), 10)
		cfg.AfterConnect = func(ctx context.Context, conn *pgx.Conn) error { return CheckConfinement(ctx, conn, opts.TenantID) }
	}
	spec := poolSpec{MaxConns: 4, Metrics: ms, Out: out, Log: log, Tune: tune}
	return withPool(ctx, opts.DatabaseURL, spec, func(pool *pgxpool.Pool) error {
		srv, err := console.New(console.Config{AuthToken: opts.AuthToken, DB: pool, ReadOnly: opts.ReadOnly, TenantID: opts.TenantID,
			Logger: log, AuditLogger: consoleAuditLogger(out, opts.Audit), QueryTimeout: consoleQueryTimeout, TrustedProxies: opts.TrustedProxies,
			Throttle: throttle, BulkMax: opts.BulkMax})
		if err != nil {
			return err
		}
		ln, err := net.Listen("tcp", cmp.Or(opts.Listen, ConsoleListenDefault))
		if err != nil {
			return fmt.Errorf("listen: %w", err)
		}
		fmt.Fprintf(out, "kfsdb console on http://%s/ (Ctrl-C stops)\n", ln.Addr())
		for _, line := range httpguard.DescribeTrustedProxies(opts.TrustedProxies) {
			fmt.Fprintln(out, line)
		}
		if link := srv.LoginLink(); link != "" {
			fmt.Fprintf(out, "no token was given, so the console made its own: log in once at http://%s%s (valid 30 minutes, one login)\n", ln.Addr(), link)
		}
		return console.Serve(ctx, ln, srv.Handler())
	})
}

// newConsoleCommand is `kfsdb console`. The token is read from a file or
// the environment, never from argv: --auth-token is there to be refused.
func newConsoleCommand(r *runner) *cobra.Command {
	opts := &ConsoleOpts{}
	var tokenFile, argvToken string
	cmd := &cobra.Command{
		Use:   "console [--listen 127.0.0.1:8080] [--tenant T] [--read-only] [--auth-token-file FILE] [--trusted-proxy IP] [--metrics-listen ADDR] [--bulk-max N]",
		Short: "web console: overview, attempts, actions, bulk actions (--tenant, --read-only, --auth-token-file)",
		Args:  exactArgs(0, "console takes no arguments"),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if argvToken != "" {
				return fmt.Errorf("%w: --auth-token is refused: every local user can read a command line (ps); put the token in a file (--auth-token-file) or $%s", ErrUsage, EnvConsoleToken)
			}
			opts.DatabaseURL, opts.Out, opts.Audit = r.databaseURL, cmd.OutOrStdout(), r.audit.durable()
			var err error
			if opts.AuthToken, err = httpguard.ReadToken(tokenFile, r.getenv(EnvConsoleToken)); err != nil {
				return fmt.Errorf("%w: %w", ErrUsage, err)
			}
			return cmdkit.RunCommand(cmd.Context(), opts, Console)
		},
	}
	f := cmd.Flags()
	f.StringVar(&opts.Listen, "listen", ConsoleListenDefault, "address to serve; a non-loopback one needs a token")
	f.StringVar(&opts.TenantID, "tenant", "", "confine the console to this tenant; connect as a role confined to it (db/roles/console_roles.sql: CALL kfsdb_confine_console) (default: every tenant, on an unconfined role)")
	f.BoolVar(&opts.ReadOnly, "read-only", false, "show no actions and refuse them")
	f.StringVar(&tokenFile, "auth-token-file", "", "file whose first line is the login token (at least 24 characters, unpredictable: openssl rand -base64 32); defaults to $"+EnvConsoleToken+", else the console makes one and prints a one-time login link")
	f.StringVar(&argvToken, "auth-token", "", "refused: a token on the command line is visible to every local user (ps); use --auth-token-file or $"+EnvConsoleToken)
	f.Func("trusted-proxy", "IP or CIDR (at least /8, IPv6 /32) of the TLS-terminating proxy in front of the console (repeatable): the last element of its Forwarded or X-Forwarded-Proto/-Host/-For is believed, the cookie is Secure", func(v string) error {
		p, err := parsePrefix(v)
		if err == nil {
			err = httpguard.CheckTrustedProxy(p)
		}
		opts.TrustedProxies = append(opts.TrustedProxies, p)
		return err
	})
	f.StringVar(&opts.MetricsListen, "metrics-listen", "", MetricsListenUsage)
	f.IntVar(&opts.BulkMax, "bulk-max", ops.BulkMaxDefault, fmt.Sprintf("the most attempts one bulk action (every match of the list's filter) may act on, 1..%d: a dry run that matches more is refused", ops.MaxBulkMax))
	return cmd
}

// parsePrefix reads an IP (one address) or a CIDR prefix.
func parsePrefix(v string) (netip.Prefix, error) {
	if a, err := netip.ParseAddr(v); err == nil {
		return netip.PrefixFrom(a.Unmap(), a.Unmap().BitLen()), nil
	}
	p, err := netip.ParsePrefix(v)
	if err != nil {
		return netip.Prefix{}, fmt.Errorf("not an IP or CIDR prefix: %q", v)
	}
	return p.Masked(), nil
}
