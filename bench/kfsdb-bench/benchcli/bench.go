package benchcli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/spf13/cobra"

	"github.com/knowledgefs/kfsdb/bench/kfsdb-bench/delivery"
	"github.com/knowledgefs/kfsdb/bench/kfsdb-bench/loadgen"
	"github.com/knowledgefs/kfsdb/cmd/kfsdb/cmdkit"
	"github.com/knowledgefs/kfsdb/migrate/redact"
	"github.com/knowledgefs/kfsdb/tests/scratch"
)

// Bench scenarios (BenchOpts.Scenario).
const (
	// ScenarioLifecycle: producers start attempts for Duration (paced to
	// Rate, or unpaced) and the worker completes them; the report is
	// throughput, latencies and costs per attempt. The default.
	ScenarioLifecycle = "lifecycle"
	// ScenarioNoisyTenant: one tenant's backlog of 5,000 attempts, then 20
	// quiet tenants with 20 each; the report compares the quiet tenants'
	// waits with their waits alone (loadgen.RunNoisyTenant).
	ScenarioNoisyTenant = "noisy-tenant"
)

// ErrUnknownScenario is returned for a scenario that is not one of the
// Scenario constants.
var ErrUnknownScenario = errors.New("unknown scenario")

// BenchOpts are the options of Bench.
type BenchOpts struct {
	// DatabaseURL is the server to create the bench database on, connected
	// to any database the user may run CREATE DATABASE from. Required; the
	// command line defaults it to $DATABASE_URL. `make bench-kfsdb` runs
	// the command on a throwaway server.
	DatabaseURL string
	// Delivery is how attempts reach the worker. Defaults to
	// delivery.Postgres.
	Delivery delivery.Mode
	// NATSURL is the NATS server of delivery.NATS: required with it,
	// refused without. The run uses a stream of its own, deleted at the end.
	NATSURL string
	// Scenario is ScenarioLifecycle (the default) or ScenarioNoisyTenant.
	// Duration, Rate, StepCheckpoints and AsyncProgressCommits apply to
	// the lifecycle only.
	Scenario string
	// Duration is how long the producers run. Defaults to 10 s.
	Duration time.Duration
	// Producers call Start concurrently. Defaults to 8.
	Producers int
	// Workers is the worker's concurrency. Defaults to 8.
	Workers int
	// Rate paces the producers (attempts started per second by all of
	// them); 0, the default, leaves them unpaced.
	Rate float64
	// StepCheckpoints makes the handler write each checkpoint before
	// Complete instead of completing through them in one write.
	StepCheckpoints bool
	// AsyncProgressCommits is repo.Config.AsyncProgressCommits for the
	// relay and worker.
	AsyncProgressCommits bool
	// Observe runs the lifecycle with Prometheus metrics and OpenTelemetry
	// tracing on (loadgen.Config.Observe), to measure their overhead.
	Observe bool
	// PollInterval, when positive, makes the postgres delivery's source
	// poll every PollInterval with no LISTEN/NOTIFY
	// (loadgen.Config.SourcePollInterval), as the floor's fetcher does.
	// Lifecycle and the postgres delivery only.
	PollInterval time.Duration
	// Out receives the report. Required.
	Out io.Writer
}

// Validate reports the first missing or invalid field.
func (o *BenchOpts) Validate() error {
	if o.DatabaseURL == "" {
		return fmt.Errorf("invalid options: DatabaseURL is required: pass --database-url or set $%s to the server to create the bench database on "+
			"(`make bench-kfsdb` in a kfsdb checkout runs kfsdb-bench bench on a throwaway server)", cmdkit.EnvDatabaseURL)
	}
	if err := cmdkit.ValidateDatabaseURL(o.DatabaseURL); err != nil {
		return err
	}
	if _, err := delivery.Check(o.Delivery, o.NATSURL, o.PollInterval); err != nil {
		return err
	}
	switch o.Scenario {
	case "", ScenarioLifecycle:
	case ScenarioNoisyTenant:
		if o.Duration != 0 || o.Rate != 0 || o.StepCheckpoints || o.AsyncProgressCommits || o.Observe || o.PollInterval != 0 {
			return fmt.Errorf("invalid options: Duration, Rate, StepCheckpoints, AsyncProgressCommits, Observe and PollInterval apply to the %s scenario only", ScenarioLifecycle)
		}
	default:
		return fmt.Errorf("invalid options: Scenario: %w %q: want %q or %q", ErrUnknownScenario, o.Scenario, ScenarioLifecycle, ScenarioNoisyTenant)
	}
	switch {
	case o.Duration < 0:
		return fmt.Errorf("invalid options: Duration must not be negative, got %s", o.Duration)
	case o.Producers < 0 || o.Producers > 256:
		return fmt.Errorf("invalid options: Producers must be 1..256 (or 0 for the default), got %d", o.Producers)
	case o.Workers < 0 || o.Workers > 256:
		return fmt.Errorf("invalid options: Workers must be 1..256 (or 0 for the default), got %d", o.Workers)
	case !(o.Rate >= 0 && o.Rate <= 1e6): // also refuses NaN
		return fmt.Errorf("invalid options: Rate must be 0..1000000 attempts/s (0: unpaced), got %v", o.Rate)
	case o.Out == nil:
		return errors.New("invalid options: Out is required")
	}
	return nil
}

// Bench runs a load scenario on a fresh database kfsdb_bench_<random>,
// created on the server at DatabaseURL and dropped afterwards, and prints
// its report. The lifecycle (P producers and a worker with W slots for
// Duration) reports throughput, start -> succeeded percentiles, round
// trips, WAL bytes and server CPU per attempt, per-statement latencies and
// dead tuples; noisy-tenant reports the quiet tenants' waits beside a
// flood, its last line `noisy-tenant: quiet tenants' p99 wait <d> (alone
// <d>) = <r>x`. Errors never contain the password.
func Bench(ctx context.Context, opts *BenchOpts) error {
	if err := opts.Validate(); err != nil {
		return err
	}
	return runBench(ctx, opts)
}

// runBench is Bench on options Validate accepted.
func runBench(ctx context.Context, opts *BenchOpts) error {
	if err := bench(ctx, opts); err != nil {
		return errors.New(redact.Text(err.Error(), opts.DatabaseURL))
	}
	return nil
}

func bench(ctx context.Context, opts *BenchOpts) error {
	fmt.Fprintf(opts.Out, "== using server %s\n", redact.Text(opts.DatabaseURL))
	srv, err := scratch.Connect(ctx, opts.DatabaseURL)
	if err != nil {
		return err
	}
	defer srv.Close()
	if opts.Scenario == ScenarioNoisyTenant {
		var res *loadgen.NoisyResult
		err := WithScratchDatabase(ctx, srv, "kfsdb_bench", opts.Out, func(url string) error {
			var err error
			res, err = loadgen.RunNoisyTenant(ctx, &loadgen.NoisyConfig{DatabaseURL: url, Delivery: opts.Delivery, NATSURL: opts.NATSURL,
				Producers: opts.Producers, Workers: opts.Workers})
			return err
		})
		if err != nil {
			return err
		}
		// After the drop, so the summary is the report's last line.
		res.WriteTable(opts.Out)
		return nil
	}
	return WithScratchDatabase(ctx, srv, "kfsdb_bench", opts.Out, func(url string) error {
		res, err := loadgen.Run(ctx, &loadgen.Config{
			DatabaseURL: url, Delivery: opts.Delivery, NATSURL: opts.NATSURL, Duration: opts.Duration, Producers: opts.Producers, Workers: opts.Workers, Rate: opts.Rate,
			StepCheckpoints: opts.StepCheckpoints, AsyncProgressCommits: opts.AsyncProgressCommits, Observe: opts.Observe,
			SourcePollInterval: opts.PollInterval,
		})
		if err != nil {
			return err
		}
		res.WriteTable(opts.Out)
		if !res.Drained {
			return errors.New("bench: attempts were left unfinished after the drain timeout")
		}
		return nil
	})
}

// newBenchCommand is `kfsdb-bench bench`, on the root's database URL.
func newBenchCommand(databaseURL *string) *cobra.Command {
	opts := &BenchOpts{}
	cmd := &cobra.Command{
		Use:   "bench",
		Short: "lifecycle load driver: producers and workers on a scratch database of the server, with a report",
		Long: `bench creates a scratch database on the server at --database-url, runs a
load scenario on it, prints its report and drops the database. kfsdb-bench
starts no server: 'make bench-kfsdb' in a kfsdb checkout runs it on one of
its own.`,
		Args: cmdkit.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			opts.DatabaseURL, opts.Out = *databaseURL, cmd.OutOrStdout()
			return cmdkit.RunCommand(cmd.Context(), opts, runBench)
		},
	}
	f := cmd.Flags()
	f.Var(&opts.Delivery, "delivery", delivery.Usage)
	f.StringVar(&opts.NATSURL, "nats-url", "", natsURLUsage+" (--delivery nats only; the run uses a stream of its own)")
	f.StringVar(&opts.Scenario, "scenario", ScenarioLifecycle, "lifecycle (throughput and latency) or noisy-tenant (one tenant's backlog of 5,000 beside 20 quiet tenants)")
	f.DurationVar(&opts.Duration, "duration", 0, "lifecycle: how long producers run (default 10s)")
	f.IntVar(&opts.Producers, "producers", 0, "concurrent Start callers (default 8)")
	f.IntVar(&opts.Workers, "workers", 0, "worker concurrency (default 8)")
	f.Float64Var(&opts.Rate, "rate", 0, "attempts started per second by all producers together (default 0: unpaced)")
	f.BoolVar(&opts.StepCheckpoints, "steps", false, "the handler writes every checkpoint (five Advance calls) before Complete, instead of completing through them in one write")
	f.BoolVar(&opts.AsyncProgressCommits, "async-progress", false, "claims, marks and leases commit without waiting for the WAL flush (repo.Config.AsyncProgressCommits)")
	f.DurationVar(&opts.PollInterval, "poll-interval", 0, "lifecycle, postgres delivery: the source polls every interval with no LISTEN/NOTIFY, as the seed-schema floor's fetcher does (default 0: LISTEN/NOTIFY)")
	f.BoolVar(&opts.Observe, "observe", false, "lifecycle: run with Prometheus metrics and OpenTelemetry tracing on (every trace sampled, spans counted and dropped), to measure their overhead")
	return cmd
}
