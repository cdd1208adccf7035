package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/spf13/cobra"

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
	// TenantID is the tenant whose attempts are purged. Required.
	TenantID string
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
	case o.TenantID == "":
		return errors.New("invalid options: TenantID is required (--tenant)")
	case len(o.TenantID) > repo.MaxTenantIDLength:
		return fmt.Errorf("invalid options: TenantID must be at most %d characters", repo.MaxTenantIDLength)
	case o.OlderThan < 0:
		return fmt.Errorf("invalid options: OlderThan must be >= 0 (--older-than), got %s", o.OlderThan)
	case o.BatchSize < 0 || o.BatchSize > repo.MaxPurgeBatch:
		return fmt.Errorf("invalid options: BatchSize must be 1..%d (or 0 for %d), got %d", repo.MaxPurgeBatch, repo.PurgeBatchSizeDefault, o.BatchSize)
	case o.Out == nil:
		return errors.New("invalid options: Out is required")
	}
	return nil
}

// Purge deletes opts.TenantID's terminal attempts completed before now
// minus opts.OlderThan, batch by batch until a batch comes back short, and
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
	line.Detail = fmt.Sprintf("terminal attempts completed before %s", cutoff.UTC().Format(time.RFC3339))
	batch := opts.BatchSize
	if batch == 0 {
		batch = repo.PurgeBatchSizeDefault
	}
	r := repo.New(nil)
	total, batches := 0, 0
	for {
		n, err := r.Purge(ctx, pool, &repo.PurgeParams{TenantID: opts.TenantID, CompletedBefore: cutoff, BatchSize: batch})
		if err != nil {
			printRow(opts.Out, "purged %d attempts before the error\n", total)
			line.Detail = fmt.Sprintf("purged %d %s before the error", total, line.Detail)
			return total, err
		}
		total += n
		batches++
		if n < int(batch) {
			break
		}
	}
	line.Detail = fmt.Sprintf("purged %d %s (%d batches of up to %d)", total, line.Detail, batches, batch)
	printRow(opts.Out, "purged %d terminal attempts of tenant \"%s\" completed before %s (%d batches of up to %d)\n",
		total, opts.TenantID, cutoff.UTC().Format(time.RFC3339), batches, batch)
	return total, nil
}

// newPurgeCommand is `kfsdb purge`.
func newPurgeCommand(r *runner) *cobra.Command {
	opts := &PurgeOpts{}
	var batch int
	cmd := &cobra.Command{
		Use:   "purge --tenant T --older-than D [--batch N] [--reason R]",
		Short: "delete a tenant's terminal attempts completed before now-D (writes an audit line: stderr, --audit-file, --audit-syslog)",
		Args:  exactArgs(0, "purge takes no arguments"),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if !cmd.Flags().Changed("older-than") {
				return usageError(cmd, "--older-than is required (0 purges every terminal attempt)")
			}
			if batch < 0 || batch > repo.MaxPurgeBatch {
				return fmt.Errorf("%w: --batch must be 1..%d", ErrUsage, repo.MaxPurgeBatch)
			}
			opts.BatchSize, opts.DatabaseURL, opts.Out, opts.Audit = int32(batch), r.databaseURL, cmd.OutOrStdout(), r.auditWriter()
			if err := opts.Validate(); err != nil {
				return fmt.Errorf("%w: %w", ErrUsage, err)
			}
			_, err := Purge(cmd.Context(), opts)
			return err
		},
	}
	cmd.Flags().StringVar(&opts.TenantID, "tenant", "", "tenant whose attempts to purge (required)")
	cmd.Flags().DurationVar(&opts.OlderThan, "older-than", 0, "retention: purge terminal attempts completed longer ago than this, e.g. 720h (required)")
	cmd.Flags().StringVar(&opts.Reason, "reason", "", "why you purge, recorded in the audit line")
	cmd.Flags().IntVar(&batch, "batch", 0, fmt.Sprintf("attempts per delete, 1..%d (default %d)", repo.MaxPurgeBatch, repo.PurgeBatchSizeDefault))
	return cmd
}
