package cli

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/spf13/cobra"

	"github.com/knowledgefs/kfsdb/cmd/kfsdb/ops"
	"github.com/knowledgefs/kfsdb/repo"
)

// countsReport is the `--json` schema of `kfsdb outbox stats`.
type countsReport struct {
	TenantID string      `json:"tenant_id,omitempty"`
	States   []countJSON `json:"attempts_by_state"`
	Due      []countJSON `json:"outbox_due_by_status"`
	// OldestDueAt and OldestDueAgeSeconds are null when nothing is due.
	OldestDueAt         *time.Time `json:"oldest_due_at"`
	OldestDueAgeSeconds *float64   `json:"oldest_due_age_seconds"`
	// PausedTenants and RateLimitedTenants are the tenants paused and
	// those with a rate limit (the --tenant alone, when given); null when
	// the role may not read the limits, and TenantLimitsError says why.
	PausedTenants      []tenantLimitJSON `json:"paused_tenants"`
	RateLimitedTenants []tenantLimitJSON `json:"rate_limited_tenants"`
	TenantLimitsError  string            `json:"tenant_limits_error,omitempty"`
}

// countJSON is one count: exact, or at least N when the cap was reached.
type countJSON struct {
	Name    string `json:"name"`
	N       int64  `json:"n"`
	AtLeast bool   `json:"at_least"`
}

// newOutboxCommand is `kfsdb outbox`, whose one subcommand is stats.
func newOutboxCommand(r *runner) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "outbox stats",
		Short: "attempts by state, the outbox's due backlog and its oldest due row",
		Args:  cobra.ArbitraryArgs,
		RunE: func(*cobra.Command, []string) error {
			return fmt.Errorf("%w: outbox needs a subcommand: stats", ErrUsage)
		},
	}
	var tenant string
	var asJSON bool
	var capN int
	stats := &cobra.Command{
		Use:   "stats [--tenant T] [--cap N]",
		Short: "attempts by state (≥ N past --cap), the outbox's due backlog and its oldest due row, the paused and rate-limited tenants",
		Args:  exactArgs(0, "outbox stats takes no arguments"),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if capN < 1 || capN > repo.MaxCountCap {
				return fmt.Errorf("%w: --cap must be 1..%d", ErrUsage, repo.MaxCountCap)
			}
			return r.onOperatorPool(cmd, func(ctx context.Context, db repo.DBTX, out io.Writer) error {
				return outboxStats(ctx, db, tenant, int32(capN), asJSON, out)
			})
		},
	}
	stats.Flags().StringVar(&tenant, "tenant", "", "count this tenant's attempts (default: every tenant's)")
	stats.Flags().BoolVar(&asJSON, "json", false, "print JSON instead of text")
	stats.Flags().IntVar(&capN, "cap", repo.CountCapDefault, fmt.Sprintf("count at most this many per state (1..%d); more shows as ≥", repo.MaxCountCap))
	cmd.AddCommand(stats)
	return cmd
}

// outboxStats prints tenant's attempts by state (every tenant's for ""),
// the outbox's due backlog and its oldest due row, each count capped at
// capN, and the paused and rate-limited tenants (tenant alone, if it is),
// as text or JSON.
func outboxStats(ctx context.Context, db repo.DBTX, tenant string, capN int32, asJSON bool, stdout io.Writer) error {
	r := repo.New(nil)
	states, err := r.CountAttempts(ctx, db, &repo.CountAttemptsParams{TenantID: tenant, AllTenants: tenant == "", Cap: capN})
	if err != nil {
		return err
	}
	backlog, err := r.OutboxBacklog(ctx, db, &repo.OutboxBacklogParams{Cap: capN})
	if err != nil {
		return err
	}
	limits, err := readLimitsReport(ctx, db, tenant)
	if err != nil {
		return err
	}
	rep := countsReport{TenantID: tenant, OldestDueAt: backlog.OldestDueAt,
		PausedTenants: limits.Paused, RateLimitedTenants: limits.RateLimited, TenantLimitsError: limits.Unreadable}
	for _, c := range states {
		rep.States = append(rep.States, countJSON{Name: string(c.State), N: c.N, AtLeast: c.AtLeast})
	}
	for _, c := range backlog.Due {
		rep.Due = append(rep.Due, countJSON{Name: string(c.Status), N: c.N, AtLeast: c.AtLeast})
	}
	if backlog.OldestDueAt != nil {
		rep.OldestDueAgeSeconds = new(backlog.OldestDueAge.Seconds())
	}
	if asJSON {
		return writeJSON(stdout, rep)
	}
	who := "every tenant"
	if tenant != "" {
		who = "tenant " + tenant
	}
	printRow(stdout, "attempts by state (%s)\n", who)
	for _, c := range rep.States {
		printRow(stdout, "  %-16s %s\n", c.Name, countText(c.N, c.AtLeast))
	}
	fmt.Fprintln(stdout, "outbox rows due now (every tenant)")
	for _, c := range rep.Due {
		printRow(stdout, "  %-16s %s\n", c.Name, countText(c.N, c.AtLeast))
	}
	if backlog.OldestDueAt != nil {
		printRow(stdout, "oldest due row: due since %s (%s ago)\n", backlog.OldestDueAt.UTC().Format(time.RFC3339), backlog.OldestDueAge.Round(time.Millisecond))
	} else {
		fmt.Fprintln(stdout, "oldest due row: none")
	}
	limits.write(stdout)
	return nil
}

func countText(n int64, atLeast bool) string {
	if atLeast {
		return fmt.Sprintf("≥ %d", n)
	}
	return fmt.Sprint(n)
}

// stuckRow is one line of the `--json` output of `kfsdb stuck`.
type stuckRow struct {
	Reason      repo.StuckReason `json:"reason"`
	Description string           `json:"description"`
	Since       time.Time        `json:"since"`
	Attempt     *ops.AttemptView `json:"attempt"`
}

// newStuckCommand is `kfsdb stuck`.
func newStuckCommand(r *runner) *cobra.Command {
	p := &repo.ListStuckParams{}
	var asJSON bool
	var limit int
	cmd := &cobra.Command{
		Use:   "stuck [--tenant T] [--pending-overdue D] [--limit N]",
		Short: "attempts that are not moving, each with the reason",
		Args:  exactArgs(0, "stuck takes no arguments"),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if limit < 1 || limit > repo.MaxListLimit || p.PendingOverdue <= 0 {
				return fmt.Errorf("%w: --limit must be 1..%d and --pending-overdue > 0", ErrUsage, repo.MaxListLimit)
			}
			p.AllTenants, p.Limit = p.TenantID == "", int32(limit)
			return r.onOperatorPool(cmd, func(ctx context.Context, db repo.DBTX, out io.Writer) error {
				return listStuck(ctx, db, p, asJSON, out)
			})
		},
	}
	cmd.Flags().StringVar(&p.TenantID, "tenant", "", "this tenant's attempts (default: every tenant's)")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON instead of text")
	cmd.Flags().DurationVar(&p.PendingOverdue, "pending-overdue", repo.PendingOverdueDefault, "a pending outbox row due longer ago than this is stuck")
	cmd.Flags().IntVar(&limit, "limit", ListDefault, fmt.Sprintf("rows to show, 1..%d", repo.MaxListLimit))
	return cmd
}

// listStuck prints the attempts that are not moving, with the reason, as
// text or JSON.
func listStuck(ctx context.Context, db repo.DBTX, p *repo.ListStuckParams, asJSON bool, stdout io.Writer) error {
	stuck, err := repo.New(nil).ListStuck(ctx, db, p)
	if err != nil {
		return err
	}
	rows := make([]stuckRow, 0, len(stuck))
	for _, s := range stuck {
		rows = append(rows, stuckRow{Reason: s.Reason, Description: s.Reason.Description(), Since: s.Since, Attempt: ops.ViewOf(s.Attempt, s.Outbox)})
	}
	if asJSON {
		return writeJSON(stdout, rows)
	}
	if len(rows) == 0 {
		fmt.Fprintln(stdout, "nothing stuck")
		return nil
	}
	for _, s := range rows {
		printRow(stdout, "%-20s %s  tenant %s  %s since %s: %s\n", s.Reason, s.Attempt.ID, s.Attempt.TenantID, s.Attempt.RunState,
			s.Since.UTC().Format(time.RFC3339), s.Description)
	}
	return nil
}
