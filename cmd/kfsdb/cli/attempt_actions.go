package cli

// The actions on attempts: `kfsdb attempts NAME` for each row of ops'
// table of actions (newAttemptsActionCommand), and what it runs
// (AttemptAction): on attempt ids or one page of a selection, each read,
// planned, confirmed, acted on at the version read and audited; on every
// match of a filter (--all), bulkAction (attempt_bulk.go).

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/spf13/cobra"

	"github.com/knowledgefs/kfsdb/cmd/kfsdb/cmdkit"
	"github.com/knowledgefs/kfsdb/cmd/kfsdb/ops"
	"github.com/knowledgefs/kfsdb/kfstype"
	"github.com/knowledgefs/kfsdb/repo"
)

// ErrAborted is returned when an operator does not confirm a bulk action.
var ErrAborted = errors.New("aborted: not confirmed (type yes, or pass --yes)")

// ErrRefused is returned when an action was refused for some attempts.
var ErrRefused = errors.New("refused")

// AttemptActionOpts are the options of AttemptAction.
type AttemptActionOpts struct {
	// DatabaseURL is the database to act on. Required.
	DatabaseURL string
	// TenantID confines the action to one tenant. Required.
	TenantID string
	// Action is what to do. Required.
	Action ops.Action
	// IDs are the attempts to act on (1..MaxActionAttempts), unless
	// Selection picks them.
	IDs []uuid.UUID
	// Selection, when IDs is empty, picks the attempts: one page of
	// repo.ListAttempts of TenantID, read on the pool the action runs on;
	// each is then acted on at the version read. Defaults to nil: IDs.
	Selection *repo.ListAttemptsParams
	// Filter, when IDs and Selection are not given, picks every attempt
	// it matches (of TenantID), up to Max, for an action offered on every
	// match (ops.ActionSpec.Bulk): a bulk action, as the
	// console's (ops.PlanBulk reads the matches, ops.RunBulk acts on
	// those the action applies to, in batches of BatchSize, each at the
	// version read). The matches the action does not apply to (a cancel
	// of an ended attempt) are counted, not reported one by one.
	// Defaults to nil.
	Filter *ops.Filter
	// Max bounds Filter's matches, 1..ops.MaxBulkMax: more is refused
	// (*ops.TooManyError) before anything changes. Defaults to
	// ops.BulkMaxDefault.
	Max int
	// BatchSize is how many attempts each batch acts on, in one
	// transaction, 1..ops.MaxBulkBatch. Defaults to ops.BulkBatchDefault.
	BatchSize int
	// Reason is why the operator acts: stored by the actions that store
	// one (ops.ActionSpec.StoresReason: cancel, supersede), and recorded in
	// every audit line (optional).
	Reason string
	// DryRun reports what would change and changes nothing.
	DryRun bool
	// Yes skips the confirmation of an action on more than one attempt.
	Yes bool
	// JSON prints a JSON array of ops.Result instead of text.
	JSON bool
	// In answers the confirmation; Out receives the report. Required.
	In  io.Reader
	Out io.Writer
	// Audit receives one audit line (ops.AuditLine, msg=audit) per
	// attempt acted on, applied or refused; none in a dry run. `kfsdb
	// attempts` sends them to stderr and the --audit-file or
	// --audit-syslog. Defaults to nil: none.
	Audit io.Writer
}

// MaxActionAttempts bounds one action command.
const MaxActionAttempts = 1000

// Validate reports the first missing or invalid field.
func (o *AttemptActionOpts) Validate() error {
	if err := ValidateDatabaseURL(o.DatabaseURL); err != nil {
		return err
	}
	if _, err := ops.ParseAction(string(o.Action)); err != nil {
		return fmt.Errorf("invalid options: Action: %w", err)
	}
	picks := 0
	for _, given := range []bool{len(o.IDs) > 0, o.Selection != nil, o.Filter != nil} {
		if given {
			picks++
		}
	}
	switch {
	case o.TenantID == "":
		return errors.New("invalid options: TenantID is required (--tenant): actions are confined to one tenant")
	case picks > 1:
		return errors.New("invalid options: give IDs, a Selection or a Filter, one of them")
	case o.Selection != nil && o.Selection.TenantID != o.TenantID:
		return errors.New("invalid options: Selection.TenantID must be TenantID")
	case o.Filter != nil && o.Filter.TenantID != o.TenantID:
		return errors.New("invalid options: Filter.TenantID must be TenantID")
	case o.Filter != nil && !o.Action.Spec().Bulk:
		return fmt.Errorf("invalid options: a Filter (--all) is for the actions offered on every match: %s", ops.OrList(ops.BulkActions()))
	case picks == 0 && len(o.IDs) == 0, len(o.IDs) > MaxActionAttempts:
		return fmt.Errorf("invalid options: give 1..%d attempt ids, got %d", MaxActionAttempts, len(o.IDs))
	case o.Max < 0 || o.Max > ops.MaxBulkMax:
		return fmt.Errorf("invalid options: Max must be 1..%d (--max)", ops.MaxBulkMax)
	case o.BatchSize < 0 || o.BatchSize > ops.MaxBulkBatch:
		return fmt.Errorf("invalid options: BatchSize must be 1..%d (--batch)", ops.MaxBulkBatch)
	case o.Out == nil:
		return errors.New("invalid options: Out is required")
	case !o.DryRun && !o.Yes && (len(o.IDs) > 1 || o.Selection != nil || o.Filter != nil) && o.In == nil:
		return errors.New("invalid options: In is required to confirm a bulk action (or set Yes)")
	}
	return nil
}

// AttemptAction applies (or with DryRun plans) an operator action on each
// attempt, through repo's guarded transitions and only to the row version
// it read: an attempt that changed meanwhile is refused, not overwritten.
// It returns the results, and an error wrapping ErrRefused when any
// attempt was refused. A Selection that matches nothing prints so and
// returns no results and no error.
func AttemptAction(ctx context.Context, opts *AttemptActionOpts) ([]ops.Result, error) {
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	var res []ops.Result
	err := withPool(ctx, opts.DatabaseURL, operatorPool, func(pool *pgxpool.Pool) (err error) {
		res, err = attemptAction(ctx, pool, opts)
		return err
	})
	return res, err
}

func attemptAction(ctx context.Context, pool *pgxpool.Pool, opts *AttemptActionOpts) ([]ops.Result, error) {
	r := repo.New(nil)
	if opts.Filter != nil {
		return bulkAction(ctx, r, pool, opts)
	}
	// By id or one page of a selection: each attempt is read, planned
	// (ops.BulkPlan), and reported, refusals included.
	plan := ops.NewBulkPlan(opts.Action, ops.Filter{TenantID: opts.TenantID}, 0)
	var read []*kfstype.Attempt
	results := map[uuid.UUID]ops.Result{}
	var order []uuid.UUID
	if opts.Selection != nil {
		page, err := r.ListAttempts(ctx, pool, opts.Selection)
		if err != nil {
			return nil, err
		}
		if len(page.Attempts) == 0 {
			fmt.Fprintln(opts.Out, "no attempt matches the selection")
			return nil, nil
		}
		read = page.Attempts
	}
	for _, id := range opts.IDs {
		a, err := r.GetAttempt(ctx, pool, &repo.GetAttemptParams{TenantID: opts.TenantID, AttemptID: id})
		switch {
		case errors.Is(err, repo.ErrNotFound):
			order = append(order, id)
			results[id] = ops.Result{AttemptID: id, Action: opts.Action, Outcome: ops.OutcomeRefused, Reason: "no such attempt for this tenant",
				Code: ops.RefusedNotFound}
			continue
		case err != nil:
			return nil, err
		}
		read = append(read, a)
	}
	for _, a := range read {
		if _, dup := results[a.ID]; !dup {
			order = append(order, a.ID)
			results[a.ID] = ops.Plan(opts.Action, a)
			plan.Add(a)
		}
	}
	inOrder := func() []ops.Result {
		out := make([]ops.Result, len(order))
		for i, id := range order {
			out[i] = results[id]
		}
		return out
	}
	if !opts.DryRun {
		would := len(plan.Targets)
		if len(order) > 1 {
			if err := confirm(opts, fmt.Sprintf("%s %d of %d attempts of tenant %s?", opts.Action, would, len(order), opts.TenantID)); err != nil {
				return inOrder(), err
			}
		}
		role := ""
		if opts.Audit != nil {
			role = poolRole(ctx, pool)
		}
		// Refused before any statement: the action does not apply in the
		// state read (or the attempt is not the tenant's).
		for _, id := range order {
			if res := results[id]; res.Outcome == ops.OutcomeRefused {
				audit(ctx, opts, role, res, "")
			}
		}
		rep, err := ops.RunBulk(ctx, r, pool, plan, ops.BulkRun{BatchSize: opts.BatchSize, Reason: opts.Reason,
			OnBatch: func(_ int, batch []ops.Result) {
				for _, res := range batch {
					results[res.AttemptID] = res
					if res.Outcome != ops.OutcomeNotReached {
						audit(ctx, opts, role, res, "")
					}
				}
			}})
		if err != nil {
			for _, res := range rep.Results {
				if res.Outcome == ops.OutcomeNotReached {
					results[res.AttemptID] = res
				}
			}
			return inOrder(), err
		}
	}
	out := inOrder()
	if err := writeResults(opts.Out, opts.JSON, out); err != nil {
		return out, err
	}
	refused := 0
	for _, res := range out {
		if res.Outcome == ops.OutcomeRefused {
			refused++
		}
	}
	if refused > 0 {
		return out, fmt.Errorf("%w: %d of %d attempts", ErrRefused, refused, len(out))
	}
	return out, nil
}

// audit writes res's audit line to opts.Audit, if set: who is the
// operating system user and role the database role, from where this
// host, why opts.Reason; detail says which bulk batch.
func audit(ctx context.Context, opts *AttemptActionOpts, role string, res ops.Result, detail string) {
	writeAudit(ctx, opts.Audit, ops.AuditLine{DBRole: role, Tenant: opts.TenantID, Attempt: res.AttemptID.String(), Action: string(res.Action),
		From: string(res.From), To: string(res.To), Result: res.Outcome, Reason: res.Reason, OperatorReason: opts.Reason, Detail: detail})
}

// confirm asks question and waits for yes, unless opts.Yes.
func confirm(opts *AttemptActionOpts, question string) error {
	if opts.Yes {
		return nil
	}
	printRow(opts.Out, "%s Type yes to go on: ", question)
	line, err := bufio.NewReader(opts.In).ReadString('\n')
	if err != nil && !errors.Is(err, io.EOF) {
		return fmt.Errorf("read confirmation: %w", err)
	}
	if strings.TrimSpace(line) != "yes" {
		fmt.Fprintln(opts.Out)
		return ErrAborted
	}
	return nil
}

func writeResults(w io.Writer, asJSON bool, results []ops.Result) error {
	if asJSON {
		return writeJSON(w, results)
	}
	for _, r := range results {
		printRow(w, "%-9s %s  %s", r.Action, r.AttemptID, r.Outcome)
		if r.From != "" {
			printRow(w, ": %s → %s", r.From, r.To)
		}
		if r.Reason != "" {
			printRow(w, " (%s)", r.Reason)
		}
		fmt.Fprintln(w)
	}
	return nil
}

// actionNames are the names of ops' actions, in the table's order: the
// subcommands of `kfsdb attempts` besides list and show.
func actionNames() []string {
	var out []string
	for _, action := range ops.Actions() {
		out = append(out, string(action))
	}
	return out
}

// newAttemptsActionCommand is `kfsdb attempts NAME` for one row of ops'
// table of actions: on the attempt ids given, on one page of a selection
// (--state, …), or, for an action offered on every match (spec.Bulk), on
// every match of it (--all).
func newAttemptsActionCommand(r *runner, af *attemptsFlags, spec ops.ActionSpec) *cobra.Command {
	action := spec.Name
	opts := &AttemptActionOpts{Action: action}
	var sel selection
	var all bool
	cmd := &cobra.Command{
		Use:   fmt.Sprintf("%s --tenant T [--reason R] [--dry-run] [--yes] ATTEMPT_ID...|--state S[,S]", action),
		Short: fmt.Sprintf("%s attempts through the guarded transition, by id or by selection", action),
		Long: fmt.Sprintf("%s the attempts given by id, or one page of a selection (--state, --space, --older-than, --newer-than, --error-code, "+
			"and --limit, --after), each at the row version read: one that changed meanwhile is refused. More than one attempt asks "+
			"for yes unless --yes. Each attempt acted on writes an audit line (stderr, --audit-file, --audit-syslog) with who, "+
			"--reason and the result. It %s.", action, spec.Does),
		Args: cobra.ArbitraryArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(args) > 0 && (sel.filtered() || sel.after != "" || all) {
				return fmt.Errorf("%w: give attempt ids or a selection (--state, --space, …, --all), not both", ErrUsage)
			}
			if all && (sel.after != "" || cmd.Flags().Changed("limit")) {
				return fmt.Errorf("%w: --all acts on every match: --after and --limit are for one page", ErrUsage)
			}
			if !all && (cmd.Flags().Changed("max") || cmd.Flags().Changed("batch")) {
				return fmt.Errorf("%w: --max and --batch are for --all", ErrUsage)
			}
			if spec.Bulk && (opts.Max < 1 || opts.BatchSize < 1) {
				return fmt.Errorf("%w: --max must be 1..%d and --batch 1..%d", ErrUsage, ops.MaxBulkMax, ops.MaxBulkBatch)
			}
			for _, arg := range args {
				id, err := uuid.Parse(arg)
				if err != nil {
					return fmt.Errorf("%w: attempt id %q is not a UUID", ErrUsage, arg)
				}
				opts.IDs = append(opts.IDs, id)
			}
			opts.DatabaseURL, opts.TenantID, opts.JSON = r.databaseURL, af.tenant, af.json
			opts.In, opts.Out, opts.Audit = r.stdin, cmd.OutOrStdout(), r.auditWriter()
			if len(args) == 0 && (sel.filtered() || all) {
				// A bulk action on a selection: one page of it, acted on at
				// the versions read, or (--all) every match.
				if opts.TenantID == "" {
					return fmt.Errorf("%w: --tenant is required", ErrUsage)
				}
				var err error
				if all {
					f, ferr := sel.filter(opts.TenantID)
					if ferr != nil {
						return ferr
					}
					opts.Filter = &f
				} else if opts.Selection, err = sel.params(opts.TenantID); err != nil {
					return err
				}
			}
			return cmdkit.RunCommand(cmd.Context(), opts, func(ctx context.Context, opts *AttemptActionOpts) error {
				_, err := AttemptAction(ctx, opts)
				return err
			})
		},
	}
	if spec.Bulk {
		cmd.Use += " [--all]"
		cmd.Short = fmt.Sprintf("%s attempts through the guarded transition, by id, by selection, or every match (--all)", action)
		cmd.Long = fmt.Sprintf("%s the attempts given by id, or one page of a selection (--state, --space, --older-than, --newer-than, --error-code, "+
			"and --limit, --after), or, with --all, every attempt the selection matches (at most --max, in batches of --batch, as the "+
			"console's bulk actions: --dry-run counts them and prints a sample), each at the row version read: one that changed meanwhile "+
			"is refused. More than one attempt asks for yes unless --yes. Each attempt acted on writes an audit line (stderr, "+
			"--audit-file, --audit-syslog) with who, --reason and the result; --all writes one more for the whole.", action)
		cmd.Flags().BoolVar(&all, "all", false, "act on every attempt the selection matches, not one page (a bulk action; no filter: every attempt of the tenant)")
		cmd.Flags().IntVar(&opts.Max, "max", ops.BulkMaxDefault, fmt.Sprintf("with --all: refuse, before any change, a selection that matches more attempts than this (1..%d)", ops.MaxBulkMax))
		cmd.Flags().IntVar(&opts.BatchSize, "batch", ops.BulkBatchDefault, fmt.Sprintf("with --all: attempts per batch, one transaction each (1..%d)", ops.MaxBulkBatch))
	}
	reasonHelp := "why: recorded in the audit line"
	if spec.StoresReason {
		reasonHelp = "why: stored with the attempt and recorded in the audit line"
	}
	cmd.Flags().StringVar(&opts.Reason, "reason", "", reasonHelp)
	cmd.Flags().BoolVar(&opts.DryRun, "dry-run", false, "say what would change, change nothing")
	cmd.Flags().BoolVar(&opts.Yes, "yes", false, "do not ask before acting on more than one attempt")
	sel.register(cmd.Flags(), 100)
	return cmd
}
