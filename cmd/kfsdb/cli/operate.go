package cli

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/spf13/cobra"

	"github.com/knowledgefs/kfsdb/cmd/kfsdb/cmdkit"
	"github.com/knowledgefs/kfsdb/cmd/kfsdb/ops"
	"github.com/knowledgefs/kfsdb/repo"
)

// PurgeOpts are the options of Purge.
type PurgeOpts struct {
	// BatchSize bounds each delete (1..10,000). Defaults to 1,000.
	BatchSize int32
	// DatabaseURL is the database to purge. Required; the command line
	// defaults it to $DATABASE_URL.
	DatabaseURL string
	// OlderThan is the retention: terminal attempts completed more than
	// this long ago (by the database clock) are deleted. Must be >= 0.
	OlderThan time.Duration
	// Out receives the command's output. Required.
	Out io.Writer
	// TenantID is the tenant whose attempts are purged. Required unless
	// AllTenants.
	TenantID string
	// AllTenants purges every tenant's attempts, tenant by tenant
	// (repo.PurgeTenants, then repo.Purge for each), instead of TenantID's.
	// Defaults to false.
	AllTenants bool
	// Pause is the wait before each delete but the first, so that a purge
	// beside live traffic holds its locks and writes its WAL in spaced
	// bursts: at most BatchSize attempts per Pause. Defaults to 0: none.
	Pause time.Duration
	// Reason is why the operator purges, for the audit line. Defaults to
	// "": none given.
	Reason string
	// Audit receives the purge's audit line (ops.AuditLine, msg=audit),
	// applied or failed. `kfsdb purge` sends it to stderr and the
	// --audit-file or --audit-syslog. Defaults to nil: none.
	Audit io.Writer
}

// Validate reports the first missing or invalid field.
func (o *PurgeOpts) Validate() error {
	if err := ValidateDatabaseURL(o.DatabaseURL); err != nil {
		return err
	}
	switch {
	case o.AllTenants && o.TenantID != "":
		return errors.New("invalid options: TenantID and AllTenants exclude each other (--tenant, --all-tenants)")
	case !o.AllTenants && o.TenantID == "":
		return errors.New("invalid options: TenantID is required (--tenant), or AllTenants (--all-tenants)")
	case len(o.TenantID) > repo.MaxTenantIDLength:
		return fmt.Errorf("invalid options: TenantID must be at most %d characters", repo.MaxTenantIDLength)
	case o.OlderThan < 0:
		return fmt.Errorf("invalid options: OlderThan must be >= 0 (--older-than), got %s", o.OlderThan)
	case o.BatchSize < 0 || o.BatchSize > repo.MaxPurgeBatch:
		return fmt.Errorf("invalid options: BatchSize must be 1..%d (or 0 for %d), got %d", repo.MaxPurgeBatch, repo.PurgeBatchSizeDefault, o.BatchSize)
	case o.Pause < 0:
		return fmt.Errorf("invalid options: Pause must be >= 0 (--pause), got %s", o.Pause)
	case o.Out == nil:
		return errors.New("invalid options: Out is required")
	}
	return nil
}

// Purge deletes opts.TenantID's (or, with opts.AllTenants, every
// tenant's) terminal attempts completed before now minus opts.OlderThan,
// batch by batch until a batch comes back short, opts.Pause apart, and
// prints how many went. It returns the count.
func Purge(ctx context.Context, opts *PurgeOpts) (int, error) {
	if err := opts.Validate(); err != nil {
		return 0, err
	}
	line := ops.AuditLine{Action: "purge", Tenant: opts.TenantID, OperatorReason: opts.Reason, Result: ops.OutcomeApplied}
	var n int
	err := withPool(ctx, opts.DatabaseURL, operatorPool, func(pool *pgxpool.Pool) (err error) {
		if opts.Audit != nil {
			line.DBRole = poolRole(ctx, pool)
		}
		n, err = purge(ctx, pool, opts, &line)
		return err
	})
	if err != nil {
		line.Result, line.Reason = ops.OutcomeFailed, err.Error()
		if line.Detail == "" {
			line.Detail = fmt.Sprintf("purged %d attempts before the error", n)
		}
	}
	writeAudit(ctx, opts.Audit, line)
	return n, err
}

// purge deletes the attempts and says what it did in line.Detail.
func purge(ctx context.Context, pool *pgxpool.Pool, opts *PurgeOpts, line *ops.AuditLine) (int, error) {
	var cutoff time.Time
	// The database's clock set completed_at, so it sets the cut-off too.
	if err := pool.QueryRow(ctx, `SELECT now() - make_interval(secs => $1)`, opts.OlderThan.Seconds()).Scan(&cutoff); err != nil {
		return 0, fmt.Errorf("could not read the database clock: %w", err)
	}
	what := fmt.Sprintf("terminal attempts completed before %s", cutoff.UTC().Format(time.RFC3339))
	line.Detail = what
	p := &purger{pool: pool, repo: repo.New(nil), cutoff: cutoff, batch: cmp.Or(opts.BatchSize, repo.PurgeBatchSizeDefault), pause: opts.Pause}
	var err error
	if opts.AllTenants {
		err = p.everyTenant(ctx)
	} else {
		err = p.tenant(ctx, opts.TenantID)
	}
	if err != nil {
		printRow(opts.Out, "purged %d attempts before the error\n", p.total)
		line.Detail = fmt.Sprintf("purged %d %s before the error", p.total, what)
		return p.total, err
	}
	how := fmt.Sprintf("%d batches of up to %d", p.batches, p.batch)
	if p.pause > 0 {
		how += fmt.Sprintf(", %s apart", p.pause)
	}
	if opts.AllTenants {
		line.Detail = fmt.Sprintf("purged %d %s in %d tenants (%s)", p.total, what, p.tenants, how)
		printRow(opts.Out, "purged %d terminal attempts of %d tenants completed before %s (%s)\n",
			p.total, p.tenants, cutoff.UTC().Format(time.RFC3339), how)
		return p.total, nil
	}
	line.Detail = fmt.Sprintf("purged %d %s (%s)", p.total, what, how)
	printRow(opts.Out, "purged %d terminal attempts of tenant \"%s\" completed before %s (%s)\n",
		p.total, opts.TenantID, cutoff.UTC().Format(time.RFC3339), how)
	return p.total, nil
}

// purger is one purge's batches and what they deleted.
type purger struct {
	pool   *pgxpool.Pool
	repo   *repo.Repo
	cutoff time.Time
	batch  int32
	pause  time.Duration
	// total, batches and tenants count what went, the deletes run and
	// the tenants that had attempts to purge.
	total, batches, tenants int
}

// everyTenant purges each tenant repo.PurgeTenants lists, page by page.
func (p *purger) everyTenant(ctx context.Context) error {
	after := ""
	for {
		page, err := p.repo.PurgeTenants(ctx, p.pool, &repo.PurgeTenantsParams{CompletedBefore: p.cutoff, AfterTenant: after})
		if err != nil {
			return err
		}
		for _, tenant := range page {
			if err := p.tenant(ctx, tenant); err != nil {
				return err
			}
			p.tenants++
		}
		if len(page) < repo.PurgeTenantsLimitDefault {
			return nil
		}
		after = page[len(page)-1]
	}
}

// tenant purges one tenant's attempts until a batch comes back short.
func (p *purger) tenant(ctx context.Context, tenant string) error {
	for {
		if p.batches > 0 && p.pause > 0 {
			if err := sleepCtx(ctx, p.pause); err != nil {
				return err
			}
		}
		n, err := p.repo.Purge(ctx, p.pool, &repo.PurgeParams{TenantID: tenant, CompletedBefore: p.cutoff, BatchSize: p.batch})
		if err != nil {
			return err
		}
		p.total += n
		p.batches++
		if n < int(p.batch) {
			return nil
		}
	}
}

// sleepCtx waits d, or until ctx ends (then its error).
func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// newPurgeCommand is `kfsdb purge`.
func newPurgeCommand(r *runner) *cobra.Command {
	opts := &PurgeOpts{}
	var batch int
	cmd := &cobra.Command{
		Use:   "purge --tenant T|--all-tenants --older-than D [--batch N] [--pause P] [--reason R]",
		Short: "delete a tenant's (or every tenant's) terminal attempts completed before now-D, in batches (writes an audit line: stderr, --audit-file, --audit-syslog)",
		Args:  exactArgs(0, "purge takes no arguments"),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if !cmd.Flags().Changed("older-than") {
				return usageError(cmd, "--older-than is required (0 purges every terminal attempt)")
			}
			if batch < 0 || batch > repo.MaxPurgeBatch {
				return fmt.Errorf("%w: --batch must be 1..%d", ErrUsage, repo.MaxPurgeBatch)
			}
			opts.BatchSize, opts.DatabaseURL, opts.Out, opts.Audit = int32(batch), r.databaseURL, cmd.OutOrStdout(), r.auditWriter()
			return cmdkit.RunCommand(cmd.Context(), opts, func(ctx context.Context, opts *PurgeOpts) error {
				_, err := Purge(ctx, opts)
				return err
			})
		},
	}
	cmd.Flags().StringVar(&opts.TenantID, "tenant", "", "tenant whose attempts to purge (required unless --all-tenants)")
	cmd.Flags().BoolVar(&opts.AllTenants, "all-tenants", false, "purge every tenant's attempts, tenant by tenant (instead of --tenant)")
	cmd.Flags().DurationVar(&opts.Pause, "pause", 0, "wait this long before each delete but the first, to bound the purge's load beside live traffic: at most --batch attempts per --pause (default 0: none)")
	cmd.Flags().DurationVar(&opts.OlderThan, "older-than", 0, "retention: purge terminal attempts completed longer ago than this, e.g. 720h (required)")
	cmd.Flags().StringVar(&opts.Reason, "reason", "", "why you purge, recorded in the audit line")
	cmd.Flags().IntVar(&batch, "batch", 0, fmt.Sprintf("attempts per delete, 1..%d (default %d)", repo.MaxPurgeBatch, repo.PurgeBatchSizeDefault))
	return cmd
}
