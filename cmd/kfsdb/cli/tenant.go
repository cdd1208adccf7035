package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/spf13/cobra"

	"github.com/knowledgefs/kfsdb/cmd/kfsdb/cmdkit"
	"github.com/knowledgefs/kfsdb/cmd/kfsdb/ops"
	"github.com/knowledgefs/kfsdb/repo"
)

// `kfsdb tenant`: a tenant's limits of direct delivery (caps, rates,
// pauses; migrations 0008 and 0011), read and changed through repo, each
// change audited.

// TenantChangeOpts are the options of ChangeTenant: the change, an
// ops.TenantChange as the console's tenant page makes it (`kfsdb tenant`
// leaves its Seen ""), and where it runs and reports.
type TenantChangeOpts struct {
	// DatabaseURL is the database to act on. Required.
	DatabaseURL string
	// TenantID is the tenant whose limits change. Required.
	TenantID string
	// TenantChange is the change: Action (required), MaxRunning, Rate,
	// Burst, ClearCap, ClearRate and Reason (why the operator acts, for
	// the audit line; with TenantPause, stored as the pause's reason).
	ops.TenantChange
	// Out receives what changed. Required.
	Out io.Writer
	// Audit receives the change's audit line (ops.AuditLine, msg=audit),
	// applied, refused or failed. `kfsdb tenant` sends it to stderr and
	// the --audit-file or --audit-syslog. Defaults to nil: none.
	Audit io.Writer
}

// Validate reports the first missing or invalid field.
func (o *TenantChangeOpts) Validate() error {
	if err := ValidateDatabaseURL(o.DatabaseURL); err != nil {
		return err
	}
	spec, known := ops.LookupTenantAction(o.Action)
	setting := o.MaxRunning != 0 || o.Rate != 0 || o.Burst != 0
	switch {
	case o.TenantID == "":
		return errors.New("invalid options: TenantID is required")
	case len(o.TenantID) > repo.MaxTenantIDLength:
		return fmt.Errorf("invalid options: TenantID must be at most %d characters", repo.MaxTenantIDLength)
	case o.Out == nil:
		return errors.New("invalid options: Out is required")
	case !spec.TakesLimits && setting:
		return fmt.Errorf("invalid options: MaxRunning, Rate and Burst go with %s only (--max-running, --rate, --burst)", ops.OrList(ops.TenantActionsTaking(true)))
	case !spec.TakesLifts && (o.ClearCap || o.ClearRate):
		return fmt.Errorf("invalid options: ClearCap and ClearRate go with %s only (--cap, --rate)", ops.OrList(ops.TenantActionsTaking(false)))
	case !known:
		return fmt.Errorf("invalid options: Action %q: want %s", o.Action, ops.OrList(ops.TenantActions()))
	case spec.TakesLimits:
		return o.validateLimits()
	}
	return nil
}

// validateLimits reports the first invalid limit of an action that takes
// limits (ops.TenantActionSpec.TakesLimits).
func (o *TenantChangeOpts) validateLimits() error {
	switch {
	case o.MaxRunning == 0 && o.Rate == 0:
		return errors.New("invalid options: give MaxRunning, Rate or both (--max-running, --rate)")
	case o.MaxRunning < 0:
		return fmt.Errorf("invalid options: MaxRunning must be > 0 (--max-running), got %d", o.MaxRunning)
	case math.IsNaN(o.Rate) || math.IsInf(o.Rate, 0) || o.Rate < 0 || o.Rate > repo.MaxTenantRate:
		return fmt.Errorf("invalid options: Rate must be leases per second, > 0 and at most %d (--rate), got %v", repo.MaxTenantRate, o.Rate)
	case o.Burst != 0 && o.Rate == 0:
		return errors.New("invalid options: Burst goes with Rate (--burst with --rate)")
	case o.Burst < 0 || o.Burst > repo.MaxTenantBurst:
		return fmt.Errorf("invalid options: Burst must be 1..%d (--burst), got %d", repo.MaxTenantBurst, o.Burst)
	}
	return nil
}

// ChangeTenant changes a tenant's limits as opts says, in one transaction,
// prints the limits before and after, and writes the audit line. A change
// that does not apply (resuming a tenant that is not paused, pausing one
// that is, lifting a limit it has not) changes nothing and returns an
// error wrapping ErrRefused.
func ChangeTenant(ctx context.Context, opts *TenantChangeOpts) error {
	if err := opts.Validate(); err != nil {
		return err
	}
	line := ops.AuditLine{Action: opts.Action, Tenant: opts.TenantID, OperatorReason: opts.Reason}
	err := withPool(ctx, opts.DatabaseURL, operatorPool, func(pool *pgxpool.Pool) error {
		if opts.Audit != nil {
			line.DBRole = poolRole(ctx, pool)
		}
		return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error { return changeTenant(ctx, tx, opts, &line) })
	})
	switch {
	case err == nil:
		line.Result = ops.OutcomeApplied
	case errors.Is(err, ErrRefused):
		line.Result, line.Reason, line.To = ops.OutcomeRefused, err.Error(), line.From
	default:
		line.Result, line.Reason = ops.OutcomeFailed, err.Error()
	}
	writeAudit(ctx, opts.Audit, line)
	return err
}

// changeTenant makes the change on tx (ops.ChangeTenantLimits, which the
// console's tenant page shares) and says what it did in line.From and
// line.To.
func changeTenant(ctx context.Context, tx pgx.Tx, opts *TenantChangeOpts, line *ops.AuditLine) error {
	res, err := ops.ChangeTenantLimits(ctx, repo.New(nil), tx, opts.TenantID, opts.TenantChange)
	if res != nil {
		line.From = ops.LimitSummary(res.Before)
	}
	var refused *ops.TenantChangeRefused
	if errors.As(err, &refused) {
		printRow(opts.Out, "tenant %s: %s refused: %s (limits: %s)\n", opts.TenantID, opts.Action, refused.Why, line.From)
		return fmt.Errorf("%w: %s", ErrRefused, refused.Why)
	}
	if err != nil {
		return err
	}
	line.To = ops.LimitSummary(res.After)
	printRow(opts.Out, "tenant %s: %s (was: %s)\n", opts.TenantID, line.To, line.From)
	return nil
}

// tenantLimitJSON is one tenant's limits in `kfsdb tenant limits --json`
// and `kfsdb outbox stats --json`: null for a limit it has not.
type tenantLimitJSON struct {
	TenantID   string `json:"tenant_id"`
	MaxRunning *int32 `json:"max_running"`
	// Rate is in leases per second; Tokens is what the bucket holds now.
	Rate        *float64   `json:"leases_per_second"`
	Burst       *int32     `json:"burst"`
	Tokens      *float64   `json:"tokens"`
	Paused      bool       `json:"paused"`
	PausedAt    *time.Time `json:"paused_at"`
	PauseReason string     `json:"pause_reason,omitempty"`
}

func limitJSON(l *repo.TenantLimit) tenantLimitJSON {
	j := tenantLimitJSON{TenantID: l.TenantID, Paused: l.Paused(), PausedAt: l.PausedAt, PauseReason: l.PauseReason}
	if l.MaxRunning > 0 {
		j.MaxRunning = &l.MaxRunning
	}
	if l.Rate > 0 {
		j.Rate, j.Burst, j.Tokens = &l.Rate, &l.Burst, &l.Tokens
	}
	return j
}

// listTenantLimits prints every tenant's limits (tenant's alone, when
// set), as text or JSON.
func listTenantLimits(ctx context.Context, db repo.DBTX, tenant string, asJSON bool, out io.Writer) error {
	var limits []repo.TenantLimit
	r := repo.New(nil)
	if tenant == "" {
		var err error
		if limits, err = r.ListTenantLimits(ctx, db, &repo.ListTenantLimitsParams{}); err != nil {
			return err
		}
	} else if l, err := ops.TenantLimits(ctx, r, db, tenant); err != nil {
		return err
	} else if l != nil {
		limits = append(limits, *l)
	}
	rows := make([]tenantLimitJSON, len(limits))
	for i := range limits {
		rows[i] = limitJSON(&limits[i])
	}
	if asJSON {
		return writeJSON(out, rows)
	}
	if len(rows) == 0 {
		fmt.Fprintln(out, "no tenant is limited")
		return nil
	}
	printRow(out, "%-24s  %5s  %12s  %6s  %8s  %-20s  %s\n", "TENANT", "CAP", "LEASES/S", "BURST", "TOKENS", "PAUSED SINCE", "REASON")
	for _, l := range limits {
		capText, rate, burst, tokens, since := "-", "-", "-", "-", "-"
		if l.MaxRunning > 0 {
			capText = fmt.Sprint(l.MaxRunning)
		}
		if l.Rate > 0 {
			rate, burst, tokens = ops.FormatRate(l.Rate), fmt.Sprint(l.Burst), fmt.Sprintf("%.2f", l.Tokens)
		}
		if l.PausedAt != nil {
			since = l.PausedAt.UTC().Format(time.DateTime)
		}
		printRow(out, "%-24s  %5s  %12s  %6s  %8s  %-20s  %s\n", l.TenantID, capText, rate, burst, tokens, since, l.PauseReason)
	}
	return nil
}

// limitsReport is what `kfsdb outbox stats` shows of the tenants' limits:
// the paused tenants and the rate-limited ones.
type limitsReport struct {
	Paused      []tenantLimitJSON
	RateLimited []tenantLimitJSON
	// Unreadable says why the limits could not be read (a role without
	// SELECT on document_compilation_tenant_limits); "" when they were.
	Unreadable string
}

// readLimitsReport reads the paused and rate-limited tenants (tenant's
// alone, when set). A role that may not read the limits' table gets a
// report that says so, not an error: the rest of the stats stand.
func readLimitsReport(ctx context.Context, db repo.DBTX, tenant string) (*limitsReport, error) {
	var all []repo.TenantLimit
	var err error
	r := repo.New(nil)
	if tenant == "" {
		all, err = r.ListTenantLimits(ctx, db, &repo.ListTenantLimitsParams{})
	} else {
		var l *repo.TenantLimit
		if l, err = ops.TenantLimits(ctx, r, db, tenant); l != nil {
			all = append(all, *l)
		}
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == "42501" { // insufficient_privilege
		return &limitsReport{Unreadable: fmt.Sprintf("this role may not read document_compilation_tenant_limits (%s): "+
			"run db/roles/console_roles.sql again, which grants it", pgErr.Message)}, nil
	}
	if err != nil {
		return nil, err
	}
	rep := &limitsReport{Paused: []tenantLimitJSON{}, RateLimited: []tenantLimitJSON{}}
	for i := range all {
		if all[i].Paused() {
			rep.Paused = append(rep.Paused, limitJSON(&all[i]))
		}
		if all[i].Rate > 0 {
			rep.RateLimited = append(rep.RateLimited, limitJSON(&all[i]))
		}
	}
	return rep, nil
}

// write prints the report as `kfsdb outbox stats` does.
func (rep *limitsReport) write(out io.Writer) {
	if rep.Unreadable != "" {
		printRow(out, "tenant limits: not shown: %s\n", rep.Unreadable)
		return
	}
	if len(rep.Paused) == 0 {
		fmt.Fprintln(out, "paused tenants: none")
	} else {
		fmt.Fprintln(out, "paused tenants (no lease until resumed: kfsdb tenant resume T)")
		for _, l := range rep.Paused {
			printRow(out, "  %-24s since %s", l.TenantID, l.PausedAt.UTC().Format(time.RFC3339))
			if l.PauseReason != "" {
				printRow(out, " (%s)", l.PauseReason)
			}
			fmt.Fprintln(out)
		}
	}
	if len(rep.RateLimited) == 0 {
		fmt.Fprintln(out, "rate-limited tenants: none")
		return
	}
	fmt.Fprintln(out, "rate-limited tenants")
	for _, l := range rep.RateLimited {
		printRow(out, "  %-24s %s leases/s, burst %d, %.2f tokens now\n", l.TenantID, ops.FormatRate(*l.Rate), *l.Burst, *l.Tokens)
	}
}

// tenantChangeNames are the commands of ops' tenant actions, in the
// table's order: the subcommands of `kfsdb tenant` besides limits.
func tenantChangeNames() []string {
	var out []string
	for _, spec := range ops.TenantActionSpecs() {
		out = append(out, spec.Command)
	}
	return out
}

// newTenantCommand is `kfsdb tenant`: limits lists the tenants' limits of
// direct delivery; each row of ops' table of tenant actions (set-limit,
// clear-limit, pause, resume) changes them.
func newTenantCommand(r *runner) *cobra.Command {
	commands := append([]string{"limits"}, tenantChangeNames()...)
	cmd := &cobra.Command{
		Use:   "tenant " + strings.Join(commands, "|"),
		Short: "a tenant's limits of direct delivery: caps on running attempts, rates of leases, pauses (each change audited)",
		Long: "A tenant's limits hold in every process that fetches (direct delivery, pgsource): a cap on its running attempts, " +
			"a rate of leases (a token bucket: --rate per second, --burst at once), and a pause (no lease until resumed; its attempts are not touched). " +
			"Each change writes an audit line (stderr, --audit-file, --audit-syslog) with who, --reason and the limits before and after.",
		Args: cobra.ArbitraryArgs,
		RunE: func(_ *cobra.Command, args []string) error {
			if len(args) == 0 {
				return fmt.Errorf("%w: tenant needs a subcommand: %s", ErrUsage, ops.OrList(commands))
			}
			return fmt.Errorf("%w: tenant %s: want %s", ErrUsage, args[0], ops.OrList(commands))
		},
	}
	var asJSON bool
	limits := &cobra.Command{
		Use:   "limits [TENANT] [--json]",
		Short: "every limited tenant (or TENANT): cap, leases per second, burst, tokens now, paused since, reason",
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) > 1 {
				return usageError(cmd, "limits takes at most one tenant")
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			tenant := ""
			if len(args) == 1 {
				tenant = args[0]
			}
			return r.onOperatorPool(cmd, func(ctx context.Context, db repo.DBTX, out io.Writer) error {
				return listTenantLimits(ctx, db, tenant, asJSON, out)
			})
		},
	}
	limits.Flags().BoolVar(&asJSON, "json", false, "print JSON instead of text")
	cmd.AddCommand(limits)
	for _, spec := range ops.TenantActionSpecs() {
		cmd.AddCommand(newTenantChangeCommand(r, spec))
	}
	return cmd
}

// newTenantChangeCommand is `kfsdb tenant COMMAND TENANT` for one row of
// ops' table of tenant actions, with the flags of what the row takes.
func newTenantChangeCommand(r *runner, spec ops.TenantActionSpec) *cobra.Command {
	opts := &TenantChangeOpts{TenantChange: ops.TenantChange{Action: spec.Name}}
	cmd := &cobra.Command{
		Use:   spec.Usage(),
		Short: spec.Does,
		Args:  exactArgs(1, spec.Name+" takes one tenant"),
		RunE: func(cmd *cobra.Command, args []string) error {
			opts.DatabaseURL, opts.TenantID, opts.Out, opts.Audit = r.databaseURL, args[0], cmd.OutOrStdout(), r.auditWriter()
			return cmdkit.RunCommand(cmd.Context(), opts, ChangeTenant)
		},
	}
	fs := cmd.Flags()
	if spec.TakesLimits {
		fs.Int32Var(&opts.MaxRunning, "max-running", 0, "the most running attempts (live leases) at once, > 0")
		fs.Float64Var(&opts.Rate, "rate", 0, fmt.Sprintf("leases per second, > 0 and at most %d (0.5: one every two seconds)", repo.MaxTenantRate))
		fs.Int32Var(&opts.Burst, "burst", 0, "with --rate: the most leases at once after a quiet spell (default: one second's worth, at least 1)")
	}
	if spec.TakesLifts {
		fs.BoolVar(&opts.ClearCap, "cap", false, "lift the cap on running attempts")
		fs.BoolVar(&opts.ClearRate, "rate", false, "lift the rate limit")
	}
	reasonHelp := "why: recorded in the audit line"
	if spec.StoresReason != "" {
		reasonHelp = "why: stored with " + spec.StoresReason + " (kfsdb tenant limits, outbox stats) and recorded in the audit line"
	}
	fs.StringVar(&opts.Reason, "reason", "", reasonHelp)
	return cmd
}
