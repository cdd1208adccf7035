package cli

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"time"

	"github.com/google/uuid"

	"github.com/knowledgefs/kfsdb/cmd/kfsdb/ops"
	"github.com/knowledgefs/kfsdb/migrate/redact"
	"github.com/knowledgefs/kfsdb/repo"
)

// ListDefault is how many attempts `kfsdb attempts list` prints per page.
const ListDefault = 50

// attemptsPage is the `--json` schema of `kfsdb attempts list`.
type attemptsPage struct {
	Attempts []*ops.AttemptView `json:"attempts"`
	// Next is the --after token of the next page; "" on the last.
	Next string `json:"next"`
}

// selection is the filter flags shared by list and the bulk actions.
type selection struct {
	states, space, after string
	limit                int
}

func (s *selection) register(fs *flag.FlagSet, limitDefault int) {
	fs.StringVar(&s.states, "state", "", "comma-separated run states (default: every state)")
	fs.StringVar(&s.space, "space", "", "knowledge space id (default: every space)")
	fs.StringVar(&s.after, "after", "", "page token printed as next by the page before")
	fs.IntVar(&s.limit, "limit", limitDefault, fmt.Sprintf("attempts per page, 1..%d", repo.MaxListLimit))
}

func (s *selection) params(tenant string) (*repo.ListAttemptsParams, error) {
	states, err := ops.ParseStates(s.states)
	if err != nil {
		return nil, fmt.Errorf("%w: --state: %w", ErrUsage, err)
	}
	p := &repo.ListAttemptsParams{TenantID: tenant, States: states, Limit: int32(s.limit)}
	if s.limit < 1 || s.limit > repo.MaxListLimit {
		return nil, fmt.Errorf("%w: --limit must be 1..%d", ErrUsage, repo.MaxListLimit)
	}
	if s.space != "" {
		id, err := uuid.Parse(s.space)
		if err != nil {
			return nil, fmt.Errorf("%w: --space %q is not a UUID", ErrUsage, s.space)
		}
		p.KnowledgeSpaceID = &id
	}
	if p.After, err = ops.DecodeCursor(s.after); err != nil {
		return nil, fmt.Errorf("%w: --after: %w", ErrUsage, err)
	}
	return p, nil
}

func runAttemptsList(ctx context.Context, fs *flag.FlagSet, args []string, url, tenant *string, asJSON *bool, stdout io.Writer, getenv func(string) string) error {
	var sel selection
	sel.register(fs, ListDefault)
	if err := parseCommand(fs, args, "Usage: kfsdb attempts list --tenant T [--state S,S] [--space ID] [--limit N] [--after TOKEN] [--json] [--database-url URL]", 0, "list takes no arguments"); err != nil {
		return err
	}
	if *tenant == "" {
		return fmt.Errorf("%w: --tenant is required", ErrUsage)
	}
	p, err := sel.params(*tenant)
	if err != nil {
		return err
	}
	dsn := cmp.Or(*url, getenv(EnvDatabaseURL))
	if err := validateDatabaseURL(dsn); err != nil {
		return fmt.Errorf("%w: %w", ErrUsage, err)
	}
	return withOperatorPool(ctx, dsn, func(db repo.DBTX) error {
		page, err := repo.New(nil).ListAttempts(ctx, db, p)
		if err != nil {
			return err
		}
		out := attemptsPage{Attempts: make([]*ops.AttemptView, 0, len(page.Attempts)), Next: ops.EncodeCursor(page.Next)}
		for _, a := range page.Attempts {
			out.Attempts = append(out.Attempts, ops.ViewOf(a, nil))
		}
		if *asJSON {
			return writeJSON(stdout, out)
		}
		fmt.Fprintf(stdout, "%-36s  %-16s  %-18s  %4s  %-20s  %s\n", "ATTEMPT", "STATE", "CHECKPOINT", "EXEC", "CREATED", "LAST ERROR")
		for _, v := range out.Attempts {
			code := "-"
			if v.LastErrorCode != nil {
				code = *v.LastErrorCode
			}
			fmt.Fprintf(stdout, "%-36s  %-16s  %-18s  %d/%d  %-20s  %s\n", v.ID, v.RunState, v.Checkpoint,
				v.ExecutionAttempts, v.MaxExecutionAttempts, v.CreatedAt.UTC().Format(time.DateTime), code)
		}
		if out.Next != "" {
			fmt.Fprintf(stdout, "next page: --after %s\n", out.Next)
		}
		return nil
	})
}

// withOperatorPool runs fn on a small pool; errors never show the password.
func withOperatorPool(ctx context.Context, dsn string, fn func(repo.DBTX) error) error {
	pool, err := connectOperator(ctx, dsn)
	if err != nil {
		return errors.New(redact.Text(err.Error(), dsn))
	}
	defer pool.Close()
	if err := fn(pool); err != nil {
		return errors.New(redact.Text(err.Error(), dsn))
	}
	return nil
}

// countsReport is the `--json` schema of `kfsdb outbox stats`.
type countsReport struct {
	TenantID string      `json:"tenant_id,omitempty"`
	States   []countJSON `json:"attempts_by_state"`
	Due      []countJSON `json:"outbox_due_by_status"`
	// OldestDueAt and OldestDueAgeSeconds are null when nothing is due.
	OldestDueAt         *time.Time `json:"oldest_due_at"`
	OldestDueAgeSeconds *float64   `json:"oldest_due_age_seconds"`
}

// countJSON is one count: exact, or at least N when the cap was reached.
type countJSON struct {
	Name    string `json:"name"`
	N       int64  `json:"n"`
	AtLeast bool   `json:"at_least"`
}

func runOutbox(ctx context.Context, args []string, stdout, stderr io.Writer, getenv func(string) string) error {
	if len(args) == 0 || args[0] != "stats" {
		return fmt.Errorf("%w: outbox needs a subcommand: stats", ErrUsage)
	}
	fs := flag.NewFlagSet("kfsdb outbox stats", flag.ContinueOnError)
	fs.SetOutput(stderr)
	url := fs.String("database-url", "", "PostgreSQL URL; defaults to $"+EnvDatabaseURL)
	tenant := fs.String("tenant", "", "count this tenant's attempts (default: every tenant's)")
	asJSON := fs.Bool("json", false, "print JSON instead of text")
	capN := fs.Int("cap", repo.CountCapDefault, fmt.Sprintf("count at most this many per state (1..%d); more shows as ≥", repo.MaxCountCap))
	if err := parseCommand(fs, args[1:], "Usage: kfsdb outbox stats [--tenant T] [--cap N] [--json] [--database-url URL]", 0, "outbox stats takes no arguments"); err != nil {
		return err
	}
	if *capN < 1 || *capN > repo.MaxCountCap {
		return fmt.Errorf("%w: --cap must be 1..%d", ErrUsage, repo.MaxCountCap)
	}
	dsn := cmp.Or(*url, getenv(EnvDatabaseURL))
	if err := validateDatabaseURL(dsn); err != nil {
		return fmt.Errorf("%w: %w", ErrUsage, err)
	}
	return withOperatorPool(ctx, dsn, func(db repo.DBTX) error {
		r := repo.New(nil)
		states, err := r.CountAttempts(ctx, db, &repo.CountAttemptsParams{TenantID: *tenant, AllTenants: *tenant == "", Cap: int32(*capN)})
		if err != nil {
			return err
		}
		backlog, err := r.OutboxBacklog(ctx, db, &repo.OutboxBacklogParams{Cap: int32(*capN)})
		if err != nil {
			return err
		}
		rep := countsReport{TenantID: *tenant, OldestDueAt: backlog.OldestDueAt}
		for _, c := range states {
			rep.States = append(rep.States, countJSON{Name: string(c.State), N: c.N, AtLeast: c.AtLeast})
		}
		for _, c := range backlog.Due {
			rep.Due = append(rep.Due, countJSON{Name: string(c.Status), N: c.N, AtLeast: c.AtLeast})
		}
		if backlog.OldestDueAt != nil {
			rep.OldestDueAgeSeconds = new(backlog.OldestDueAge.Seconds())
		}
		if *asJSON {
			return writeJSON(stdout, rep)
		}
		who := "every tenant"
		if *tenant != "" {
			who = "tenant " + *tenant
		}
		fmt.Fprintf(stdout, "attempts by state (%s)\n", who)
		for _, c := range rep.States {
			fmt.Fprintf(stdout, "  %-16s %s\n", c.Name, countText(c.N, c.AtLeast))
		}
		fmt.Fprintln(stdout, "outbox rows due now (every tenant)")
		for _, c := range rep.Due {
			fmt.Fprintf(stdout, "  %-16s %s\n", c.Name, countText(c.N, c.AtLeast))
		}
		if backlog.OldestDueAt != nil {
			fmt.Fprintf(stdout, "oldest due row: due since %s (%s ago)\n", backlog.OldestDueAt.UTC().Format(time.RFC3339), backlog.OldestDueAge.Round(time.Millisecond))
		} else {
			fmt.Fprintln(stdout, "oldest due row: none")
		}
		return nil
	})
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

func runStuck(ctx context.Context, args []string, stdout, stderr io.Writer, getenv func(string) string) error {
	fs := flag.NewFlagSet("kfsdb stuck", flag.ContinueOnError)
	fs.SetOutput(stderr)
	url := fs.String("database-url", "", "PostgreSQL URL; defaults to $"+EnvDatabaseURL)
	tenant := fs.String("tenant", "", "this tenant's attempts (default: every tenant's)")
	asJSON := fs.Bool("json", false, "print JSON instead of text")
	overdue := fs.Duration("pending-overdue", repo.PendingOverdueDefault, "a pending outbox row due longer ago than this is stuck")
	limit := fs.Int("limit", ListDefault, fmt.Sprintf("rows to show, 1..%d", repo.MaxListLimit))
	if err := parseCommand(fs, args, "Usage: kfsdb stuck [--tenant T] [--pending-overdue D] [--limit N] [--json] [--database-url URL]", 0, "stuck takes no arguments"); err != nil {
		return err
	}
	if *limit < 1 || *limit > repo.MaxListLimit || *overdue <= 0 {
		return fmt.Errorf("%w: --limit must be 1..%d and --pending-overdue > 0", ErrUsage, repo.MaxListLimit)
	}
	dsn := cmp.Or(*url, getenv(EnvDatabaseURL))
	if err := validateDatabaseURL(dsn); err != nil {
		return fmt.Errorf("%w: %w", ErrUsage, err)
	}
	return withOperatorPool(ctx, dsn, func(db repo.DBTX) error {
		stuck, err := repo.New(nil).ListStuck(ctx, db, &repo.ListStuckParams{TenantID: *tenant, AllTenants: *tenant == "",
			PendingOverdue: *overdue, Limit: int32(*limit)})
		if err != nil {
			return err
		}
		rows := make([]stuckRow, 0, len(stuck))
		for _, s := range stuck {
			rows = append(rows, stuckRow{Reason: s.Reason, Description: s.Reason.Description(), Since: s.Since, Attempt: ops.ViewOf(s.Attempt, s.Outbox)})
		}
		if *asJSON {
			return writeJSON(stdout, rows)
		}
		if len(rows) == 0 {
			fmt.Fprintln(stdout, "nothing stuck")
			return nil
		}
		for _, s := range rows {
			fmt.Fprintf(stdout, "%-20s %s  tenant %s  %s since %s: %s\n", s.Reason, s.Attempt.ID, s.Attempt.TenantID, s.Attempt.RunState,
				s.Since.UTC().Format(time.RFC3339), s.Description)
		}
		return nil
	})
}
