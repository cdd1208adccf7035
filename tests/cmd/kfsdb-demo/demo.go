package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/knowledgefs/kfsdb/bench/kfsdb-bench/benchcli"
	"github.com/knowledgefs/kfsdb/bench/kfsdb-bench/delivery"
	"github.com/knowledgefs/kfsdb/cmd/kfsdb/cli"
	"github.com/knowledgefs/kfsdb/cmd/kfsdb/cmdkit"
	"github.com/knowledgefs/kfsdb/migrate/redact"
	"github.com/knowledgefs/kfsdb/tests/pgtest"
)

// Demo defaults and bounds.
const (
	DemoAttemptsDefault = 400
	MaxDemoAttempts     = 5000
	DemoSeedDefault     = 1
	DemoTimeoutDefault  = 45 * time.Second
)

// DemoOpts are the options of Demo.
type DemoOpts struct {
	// DatabaseURL is the server to create the demo database on, connected to
	// any database the user may run CREATE DATABASE from. Optional: when
	// empty, Demo acquires a throwaway server like the tests do
	// (KFS_TEST_DATABASE_URL, else a container of KFS_TEST_POSTGRES_IMAGE).
	// The command line defaults it to $DATABASE_URL.
	DatabaseURL string
	// Delivery is how attempts reach the workers: delivery.Postgres (the
	// default; each worker leases straight from the outbox, and the
	// scenarios that need a broker are left out) or delivery.Relay (a
	// relay publishes to an in-process queue, with dead letters and a
	// broker outage).
	Delivery delivery.Mode
	// Attempts is how many compilation attempts the workload runs
	// (26..5,000). Defaults to 400.
	Attempts int
	// Out receives the command's output. Required.
	Out io.Writer
	// Seed shuffles which attempt follows which scenario. Defaults to 1.
	Seed uint64
	// Timeout bounds a stall: if no attempt is started and none changes
	// state for that long before all are terminal, Demo fails. A slow
	// (loaded) machine only makes the run longer. Defaults to 45 s.
	Timeout time.Duration
	// Verbose logs the runtime's INFO records too (relay, sources, workers).
	// Defaults to false: WARN and above.
	Verbose bool
	// Keep keeps the demo database after a successful run (and the
	// throwaway server's container, if the demo started one), and writes
	// its URL to a file only the user can read, for `kfsdb console`.
	Keep bool
}

// Validate reports the first missing or invalid field.
func (o *DemoOpts) Validate() error {
	if err := cmdkit.ValidateDatabaseURLSyntax(o.DatabaseURL); err != nil {
		return err
	}
	if o.Delivery == delivery.NATS {
		// The demo starts no broker; NATS runs through kfsdb-bench work and bench.
		return fmt.Errorf("invalid options: Delivery: %w %q for the demo: want %q or %q (NATS: kfsdb-bench work or kfsdb-bench bench --delivery nats --nats-url URL)",
			delivery.ErrUnknown, o.Delivery, delivery.Postgres, delivery.Relay)
	}
	if _, err := delivery.Check(o.Delivery, "", 0); err != nil {
		return err
	}
	if o.Attempts != 0 && (o.Attempts < minDemoAttempts || o.Attempts > MaxDemoAttempts) {
		return fmt.Errorf("invalid options: Attempts must be %d..%d (or 0 for %d), got %d", minDemoAttempts, MaxDemoAttempts, DemoAttemptsDefault, o.Attempts)
	}
	if o.Timeout < 0 {
		return fmt.Errorf("invalid options: Timeout must not be negative, got %s", o.Timeout)
	}
	if o.Out == nil {
		return errors.New("invalid options: Out is required")
	}
	return nil
}

// Demo creates a fresh database kfsdb_demo_<random>, applies every
// migration, runs a mixed workload of compilation attempts through real
// workers (successes, retries, failures, panics, exhausted attempts, a
// worker that dies holding a lease, cancels, supersedes and manual
// retries), prints live progress, an outcome table, counters and
// latencies, checks the end state, and then drops the database (and stops
// the throwaway server, if it started one), also when ctx is canceled.
// The workers lease straight from the outbox (delivery.Postgres), or
// receive from a relay over an in-process queue (delivery.Relay), which
// adds dead letters and a broker outage. It fails if any
// check fails or the workload makes no progress for Timeout.
func Demo(ctx context.Context, opts *DemoOpts) error {
	if err := opts.Validate(); err != nil {
		return err
	}
	return demoValidated(ctx, opts)
}

// demoValidated is Demo on options Validate accepted.
func demoValidated(ctx context.Context, opts *DemoOpts) error {
	if err := demo(ctx, opts); err != nil {
		return errors.New(redact.Text(err.Error(), opts.DatabaseURL))
	}
	return nil
}

func demo(ctx context.Context, opts *DemoOpts) error {
	out := cmdkit.NewSyncWriter(opts.Out)
	var keptURL, containerID string
	err := withServer(ctx, opts.DatabaseURL, out, func(srv *pgtest.Server) error {
		run := func(url string) error {
			fmt.Fprintln(out, "== kfsdb migrate status")
			if err := cli.Migrate(ctx, &cli.MigrateOpts{Command: cli.MigrateStatus, DatabaseURL: url, Out: out}); err != nil {
				return err
			}
			if err := runWorkload(ctx, opts, out, url); err != nil {
				return err
			}
			keptURL = url
			return nil
		}
		if !opts.Keep {
			return benchcli.WithScratchDatabase(ctx, srv, "kfsdb_demo", out, run)
		}
		if err := benchcli.WithKeptScratchDatabase(ctx, srv, "kfsdb_demo", out, run); err != nil {
			return err
		}
		containerID = srv.Keep()
		return nil
	})
	if err != nil {
		return err
	}
	return printConsoleHint(out, opts.Keep, keptURL, containerID)
}

// printConsoleHint ends the demo with how to look at it in the console.
// The kept database's URL carries a password, so it goes to a file only
// the user can read, not to the screen.
func printConsoleHint(out io.Writer, kept bool, url, containerID string) error {
	if !kept {
		fmt.Fprintln(out, "== to browse this run in the web console, keep its database: make demo DEMO_ARGS=--keep")
		return nil
	}
	f, err := os.CreateTemp("", "kfsdb-demo-*.url")
	if err != nil {
		return fmt.Errorf("write the kept database's URL: %w", err)
	}
	defer f.Close()
	if _, err := io.WriteString(f, url); err != nil {
		return fmt.Errorf("write the kept database's URL: %w", err)
	}
	fmt.Fprintf(out, "== the demo database is kept; open it in the console (then http://127.0.0.1:8080):\n")
	fmt.Fprintf(out, "   go run ./cmd/kfsdb console --database-url \"$(cat %s)\"\n", f.Name())
	fmt.Fprintf(out, "   or, from the command line: go run ./cmd/kfsdb outbox stats --database-url \"$(cat %s)\"\n", f.Name())
	if containerID != "" {
		fmt.Fprintf(out, "   remove the throwaway server afterwards: docker rm -f %s\n", containerID[:min(12, len(containerID))])
	}
	return nil
}

// withServer runs fn on the server at serverURL, or on a throwaway server
// the test harness starts when serverURL is empty, and closes it afterwards.
func withServer(ctx context.Context, serverURL string, out io.Writer, fn func(srv *pgtest.Server) error) (retErr error) {
	var (
		srv *pgtest.Server
		err error
	)
	if serverURL != "" {
		fmt.Fprintf(out, "== using server %s\n", redact.Text(serverURL))
		srv, err = pgtest.ConnectServer(ctx, serverURL)
	} else {
		fmt.Fprintln(out, "== starting a throwaway PostgreSQL server (no --database-url or $DATABASE_URL)")
		srv, err = pgtest.StartServer(ctx)
	}
	if err != nil {
		return err
	}
	defer func() {
		if err := srv.Close(); err != nil && retErr == nil {
			retErr = err
		}
	}()
	return fn(srv)
}

func runWorkload(ctx context.Context, opts *DemoOpts, out io.Writer, url string) error {
	n := cmp.Or(opts.Attempts, DemoAttemptsDefault)
	seed := cmp.Or(opts.Seed, DemoSeedDefault)
	timeout := cmp.Or(opts.Timeout, DemoTimeoutDefault)

	lat := newLatencies()
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return fmt.Errorf("could not parse the demo database URL: %w", err)
	}
	cfg.MaxConns = demoPoolMaxConns
	cfg.ConnConfig.Tracer = statementTracer{lat: lat}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return fmt.Errorf("could not connect to the demo database: %w", err)
	}
	defer pool.Close()

	mode := cmp.Or(opts.Delivery, delivery.Default)
	w := newWorkload(out, cmdkit.NewLogger(out, opts.Verbose), pool, lat, mode, n, seed)
	counts := map[string]int{}
	for _, e := range w.entries {
		counts[e.sc.name]++
	}
	w.printHeader(n, seed, counts)
	if err := w.run(ctx, timeout); err != nil {
		return err
	}
	failed, err := w.report(ctx)
	if err != nil {
		return err
	}
	if failed > 0 {
		fmt.Fprintf(out, "\ndemo: FAIL (%d of the checks failed)\n", failed)
		return fmt.Errorf("demo: %d checks failed", failed)
	}
	fmt.Fprintf(out, "\ndemo: PASS (%d attempts)\n", n)
	return nil
}

// printHeader prints what the workload runs and how.
func (w *workload) printHeader(n int, seed uint64, counts map[string]int) {
	runtime := fmt.Sprintf("%d workers × %d, each leasing from the outbox (pgsource)", demoWorkers, demoWorkerConcurrency)
	if w.mode == delivery.Relay {
		runtime = fmt.Sprintf("relay + %d workers × %d over memqueue", demoWorkers, demoWorkerConcurrency)
	}
	fmt.Fprintf(w.out, "== workload: %d attempts (seed %d) in %d tenants × %d spaces; %d producers; %s\n",
		n, seed, len(demoTenants), demoSpacesPerTenant, demoProducers, runtime)
	fmt.Fprintf(w.out, "   delivery: %s\n", w.deliveryNote())
	fmt.Fprintf(w.out, "   scenarios: %s\n", formatCounts(counts))
	timings := fmt.Sprintf("lease %s (heartbeat %s), retry backoff %s..%s", demoLease, (demoLease / 3).Round(time.Millisecond), demoRetryBase, demoRetryCap)
	if w.mode == delivery.Relay {
		timings += fmt.Sprintf(", relay poll %s, dispatch backoff %s..%s ×%d, visibility %s, claim lock %s",
			demoPollInterval, demoDispatchBase, demoDispatchCap, demoMaxDispatch, demoVisibility, demoLockDuration)
	} else {
		timings += fmt.Sprintf(", source poll %s (LISTEN wakes it sooner)", demoPollInterval)
	}
	fmt.Fprintf(w.out, "   timings: %s\n", timings)
}

// deliveryNote names the delivery mode and, under postgres delivery, what
// it leaves out.
func (w *workload) deliveryNote() string {
	if w.mode == delivery.Relay {
		return "relay (the relay publishes to an in-process queue, workers lease what they receive; with dead letters and a broker outage)"
	}
	return "postgres (workers lease from the outbox); " + w.skippedNote()
}

// skippedNote names what postgres delivery leaves out for want of a
// broker.
func (w *workload) skippedNote() string {
	return "relay-only scenarios skipped: " + strings.Join(w.skipped, ", ") + ", broker outage"
}
