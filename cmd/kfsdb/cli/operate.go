package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/knowledgefs/kfsdb/migrate/redact"
	"github.com/knowledgefs/kfsdb/repo"
)

// validateDatabaseURL requires dsn and that pgx can parse it; its error
// never shows the password.
func validateDatabaseURL(dsn string) error {
	if dsn == "" {
		return fmt.Errorf("invalid options: DatabaseURL is required: pass --database-url or set $%s", EnvDatabaseURL)
	}
	if _, err := pgconn.ParseConfig(dsn); err != nil {
		return fmt.Errorf("invalid options: DatabaseURL is not a valid PostgreSQL URL: %s", redact.Text(err.Error(), dsn))
	}
	return nil
}

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
}

// Validate reports the first missing or invalid field.
func (o *PurgeOpts) Validate() error {
	if err := validateDatabaseURL(o.DatabaseURL); err != nil {
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
	n, err := purge(ctx, opts)
	if err != nil {
		return n, errors.New(redact.Text(err.Error(), opts.DatabaseURL))
	}
	return n, nil
}

func purge(ctx context.Context, opts *PurgeOpts) (int, error) {
	pool, err := pgxpool.New(ctx, opts.DatabaseURL)
	if err != nil {
		return 0, fmt.Errorf("could not connect: %w", err)
	}
	defer pool.Close()
	var cutoff time.Time
	// The database's clock set completed_at, so it sets the cut-off too.
	if err := pool.QueryRow(ctx, `SELECT now() - make_interval(secs => $1)`, opts.OlderThan.Seconds()).Scan(&cutoff); err != nil {
		return 0, fmt.Errorf("could not read the database clock: %w", err)
	}
	batch := opts.BatchSize
	if batch == 0 {
		batch = repo.PurgeBatchSizeDefault
	}
	r := repo.New(nil)
	total, batches := 0, 0
	for {
		n, err := r.Purge(ctx, pool, &repo.PurgeParams{TenantID: opts.TenantID, CompletedBefore: cutoff, BatchSize: batch})
		if err != nil {
			fmt.Fprintf(opts.Out, "purged %d attempts before the error\n", total)
			return total, err
		}
		total += n
		batches++
		if n < int(batch) {
			break
		}
	}
	fmt.Fprintf(opts.Out, "purged %d terminal attempts of tenant %q completed before %s (%d batches of up to %d)\n",
		total, opts.TenantID, cutoff.UTC().Format(time.RFC3339), batches, batch)
	return total, nil
}
