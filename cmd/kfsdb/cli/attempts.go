package cli

import (
	"bufio"
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/spf13/cobra"

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
	// it matches (of TenantID), up to Max: a bulk action, as the
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
	// Reason is why the operator acts: stored with a cancel or a
	// supersede, and recorded in every audit line (optional).
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

// bulkSample is how many matches a bulk dry run prints.
const bulkSample = 20

// bulkAction is AttemptAction on every match of opts.Filter: the dry run
// (ops.PlanBulk), the confirmation, the batches (ops.RunBulk), one audit
// line per attempt acted on and one for the whole. It returns the
// results of the attempts acted on.
func bulkAction(ctx context.Context, r *repo.Repo, pool *pgxpool.Pool, opts *AttemptActionOpts) ([]ops.Result, error) {
	plan, err := ops.PlanBulk(ctx, r, pool, opts.Action, *opts.Filter, cmp.Or(opts.Max, ops.BulkMaxDefault), bulkSample)
	if err != nil {
		return nil, err
	}
	if plan.Matched == 0 {
		fmt.Fprintln(opts.Out, "no attempt matches the selection")
		return nil, nil
	}
	sample := make([]ops.Result, len(plan.Sample))
	for i, row := range plan.Sample {
		sample[i] = row.Plan
	}
	if opts.JSON && opts.DryRun {
		return sample, writeJSON(opts.Out, bulkPlanJSON{Filter: plan.Filter.String(), Matched: plan.Matched, WouldChange: len(plan.Targets),
			WouldChangeByState: plan.ChangesByState(), UnchangedByState: plan.Unchanged, Sample: sample})
	}
	if !opts.JSON {
		printRow(opts.Out, "%d attempts match %s: %s would change %d", plan.Matched, plan.Filter, opts.Action, len(plan.Targets))
		if len(plan.Targets) > 0 {
			printRow(opts.Out, " (%s) to %s", stateList(plan.ChangesByState()), opts.Action.Target())
		}
		if stay := plan.Matched - len(plan.Targets); stay > 0 {
			printRow(opts.Out, " and leave %d as they are (%s)", stay, stateList(plan.Unchanged))
		}
		fmt.Fprintln(opts.Out)
	}
	if opts.DryRun {
		printRow(opts.Out, "the first %d:\n", len(sample))
		return sample, writeResults(opts.Out, false, sample)
	}
	if len(plan.Targets) == 0 {
		return nil, nil
	}
	if err := confirm(opts, fmt.Sprintf("%s %d attempts?", opts.Action, len(plan.Targets))); err != nil {
		return nil, err
	}
	role := ""
	if opts.Audit != nil {
		role = poolRole(ctx, pool)
	}
	rep, runErr := ops.RunBulk(ctx, r, pool, plan, ops.BulkRun{BatchSize: opts.BatchSize, Reason: opts.Reason,
		OnBatch: func(batch int, results []ops.Result) {
			for _, res := range results {
				if res.Outcome != ops.OutcomeNotReached {
					audit(ctx, opts, role, res, fmt.Sprintf("bulk batch %d", batch))
				}
			}
		}})
	line := ops.AuditLine{DBRole: role, Tenant: opts.TenantID, Action: "bulk-" + string(opts.Action), Result: ops.OutcomeApplied,
		OperatorReason: opts.Reason, Detail: rep.Summary(plan)}
	if runErr != nil {
		line.Result, line.Reason = ops.OutcomeFailed, runErr.Error()
	}
	writeAudit(ctx, opts.Audit, line)
	var done []ops.Result
	for _, res := range rep.Results {
		if res.Outcome != ops.OutcomeNotReached {
			done = append(done, res)
		}
	}
	if err := writeResults(opts.Out, opts.JSON, done); err != nil {
		return rep.Results, err
	}
	if !opts.JSON {
		printRow(opts.Out, "%s: %d applied, %d skipped (changed since the dry run), %d not reached, of %d\n",
			opts.Action, rep.Applied, rep.Skipped, rep.NotReached, len(rep.Results))
	}
	switch {
	case runErr != nil:
		return rep.Results, fmt.Errorf("bulk %s stopped after %d of %d attempts: %w", opts.Action, len(rep.Results)-rep.NotReached, len(rep.Results), runErr)
	case rep.Skipped > 0:
		return rep.Results, fmt.Errorf("%w: %d of %d attempts (changed since the dry run)", ErrRefused, rep.Skipped, len(rep.Results))
	}
	return rep.Results, nil
}

// bulkPlanJSON is the `--json` schema of a dry run with --all.
type bulkPlanJSON struct {
	Filter             string                   `json:"filter"`
	Matched            int                      `json:"matched"`
	WouldChange        int                      `json:"would_change"`
	WouldChangeByState map[kfstype.RunState]int `json:"would_change_by_state"`
	UnchangedByState   map[kfstype.RunState]int `json:"unchanged_by_state"`
	// Sample is the first matches and what the action would do to each.
	Sample []ops.Result `json:"sample"`
}

// stateList is "3 queued, 2 running".
func stateList(m map[kfstype.RunState]int) string {
	var parts []string
	for _, st := range kfstype.RunStates() {
		if m[st] > 0 {
			parts = append(parts, fmt.Sprintf("%d %s", m[st], st))
		}
	}
	return strings.Join(parts, ", ")
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

// AttemptShowOpts are the options of AttemptShow.
type AttemptShowOpts struct {
	DatabaseURL string
	TenantID    string
	ID          uuid.UUID
	JSON        bool
	Out         io.Writer
}

// AttemptShow prints one attempt of a tenant with its outbox row and
// timeline. A missing attempt (or another tenant's) is repo.ErrNotFound.
func AttemptShow(ctx context.Context, opts *AttemptShowOpts) (*ops.AttemptView, error) {
	if err := ValidateDatabaseURL(opts.DatabaseURL); err != nil {
		return nil, err
	}
	if opts.TenantID == "" || opts.Out == nil || opts.ID == uuid.Nil {
		return nil, errors.New("invalid options: TenantID, ID and Out are required")
	}
	var v *ops.AttemptView
	err := withPool(ctx, opts.DatabaseURL, operatorPool, func(pool *pgxpool.Pool) error {
		a, o, err := repo.New(nil).GetAttemptWithOutbox(ctx, pool, &repo.GetAttemptWithOutboxParams{TenantID: opts.TenantID, AttemptID: opts.ID})
		if err != nil {
			return fmt.Errorf("attempt %s of tenant %s: %w", opts.ID, opts.TenantID, err)
		}
		v = ops.ViewOf(a, o)
		v.Timeline = ops.Timeline(a, o)
		if opts.JSON {
			return writeJSON(opts.Out, v)
		}
		writeAttemptText(opts.Out, v)
		return nil
	})
	if err != nil {
		return nil, err
	}
	return v, nil
}

func writeAttemptText(w io.Writer, v *ops.AttemptView) {
	tm := func(t *time.Time) string {
		if t == nil {
			return "-"
		}
		return t.UTC().Format(time.RFC3339Nano)
	}
	printRow(w, "attempt      %s (tenant %s, space %s)\n", v.ID, v.TenantID, v.KnowledgeSpaceID)
	printRow(w, "document     %s version %d\n", v.DocumentAssetID, v.DocumentVersion)
	printRow(w, "state        %s at checkpoint %s, execution %d of %d, row version %d\n", v.RunState, v.Checkpoint, v.ExecutionAttempts, v.MaxExecutionAttempts, v.RowVersion)
	if v.CandidatePublicationID != nil {
		printRow(w, "candidate    %s %s\n", v.CandidatePublicationID, v.CandidateFingerprint)
	} else {
		fmt.Fprintln(w, "candidate    -")
	}
	printRow(w, "worker       %s, lease held %v until %s, heartbeat %s\n", v.WorkerID, v.LeaseHeld, tm(v.LeaseExpiresAt), tm(v.HeartbeatAt))
	printRow(w, "last error   %s: %s\n", v.LastErrorCode, v.LastErrorMessage)
	if o := v.Outbox; o != nil {
		printRow(w, "outbox       %s %s, dispatch %d, available at %s, locked by %s until %s, queue job %s\n",
			o.ID, o.Status, o.DispatchAttempts, o.AvailableAt.UTC().Format(time.RFC3339Nano), o.LockedBy, tm(o.LockedUntil), o.QueueJobID)
	}
	fmt.Fprintln(w, "timeline")
	for _, e := range v.Timeline {
		printRow(w, "  %s  %s\n", e.At.UTC().Format(time.RFC3339Nano), e.What)
	}
}

// newAttemptsCommand is `kfsdb attempts`: list and show read a tenant's
// attempts, cancel, retry and supersede act on them.
func newAttemptsCommand(r *runner) *cobra.Command {
	var af attemptsFlags
	cmd := &cobra.Command{
		Use:   "attempts list|show|cancel|retry|supersede --tenant T",
		Short: "find, inspect and act on a tenant's attempts through the guarded transitions (filters, pages, --dry-run, --yes, --json)",
		Args:  cobra.ArbitraryArgs,
		RunE: func(_ *cobra.Command, args []string) error {
			if len(args) == 0 {
				return fmt.Errorf("%w: attempts needs a subcommand: list, show, cancel, retry or supersede", ErrUsage)
			}
			return fmt.Errorf("%w: attempts %s: want list, show, cancel, retry or supersede", ErrUsage, args[0])
		},
	}
	cmd.PersistentFlags().StringVar(&af.tenant, "tenant", "", "the tenant (required)")
	cmd.PersistentFlags().BoolVar(&af.json, "json", false, "print JSON instead of text")
	cmd.AddCommand(newAttemptsListCommand(r, &af), newAttemptsShowCommand(r, &af))
	for _, action := range ops.Actions() {
		cmd.AddCommand(newAttemptsActionCommand(r, &af, action))
	}
	return cmd
}

// newAttemptsShowCommand is `kfsdb attempts show`.
func newAttemptsShowCommand(r *runner, af *attemptsFlags) *cobra.Command {
	return &cobra.Command{
		Use:   "show --tenant T ATTEMPT_ID",
		Short: "one attempt with its outbox row and timeline",
		Args:  exactArgs(1, "show takes one attempt id"),
		RunE: func(cmd *cobra.Command, args []string) error {
			id, err := uuid.Parse(args[0])
			if err != nil {
				return fmt.Errorf("%w: attempt id %q is not a UUID", ErrUsage, args[0])
			}
			opts := &AttemptShowOpts{DatabaseURL: r.databaseURL, TenantID: af.tenant, ID: id, JSON: af.json, Out: cmd.OutOrStdout()}
			if opts.TenantID == "" {
				return fmt.Errorf("%w: --tenant is required", ErrUsage)
			}
			if err := ValidateDatabaseURL(opts.DatabaseURL); err != nil {
				return fmt.Errorf("%w: %w", ErrUsage, err)
			}
			_, err = AttemptShow(cmd.Context(), opts)
			return err
		},
	}
}

// newAttemptsActionCommand is `kfsdb attempts cancel|retry|supersede`: on
// the attempt ids given, on one page of a selection (--state, …), or on
// every match of it (--all).
func newAttemptsActionCommand(r *runner, af *attemptsFlags, action ops.Action) *cobra.Command {
	opts := &AttemptActionOpts{Action: action}
	var sel selection
	var all bool
	cmd := &cobra.Command{
		Use:   fmt.Sprintf("%s --tenant T [--reason R] [--dry-run] [--yes] ATTEMPT_ID...|--state S[,S] [--all]", action),
		Short: fmt.Sprintf("%s attempts through the guarded transition, by id, by selection, or every match (--all)", action),
		Long: fmt.Sprintf("%s the attempts given by id, or one page of a selection (--state, --space, --older-than, --newer-than, --error-code, "+
			"and --limit, --after), or, with --all, every attempt the selection matches (at most --max, in batches of --batch, as the "+
			"console's bulk actions: --dry-run counts them and prints a sample), each at the row version read: one that changed meanwhile "+
			"is refused. More than one attempt asks for yes unless --yes. Each attempt acted on writes an audit line (stderr, "+
			"--audit-file, --audit-syslog) with who, --reason and the result; --all writes one more for the whole.", action),
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
			if opts.Max < 1 || opts.BatchSize < 1 {
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
			if err := opts.Validate(); err != nil {
				return fmt.Errorf("%w: %w", ErrUsage, err)
			}
			_, err := AttemptAction(cmd.Context(), opts)
			return err
		},
	}
	reasonHelp := "why: recorded in the audit line"
	if action != ops.Retry {
		reasonHelp = "why: stored with the attempt and recorded in the audit line"
	}
	cmd.Flags().StringVar(&opts.Reason, "reason", "", reasonHelp)
	cmd.Flags().BoolVar(&opts.DryRun, "dry-run", false, "say what would change, change nothing")
	cmd.Flags().BoolVar(&opts.Yes, "yes", false, "do not ask before acting on more than one attempt")
	cmd.Flags().BoolVar(&all, "all", false, "act on every attempt the selection matches, not one page (a bulk action; no filter: every attempt of the tenant)")
	cmd.Flags().IntVar(&opts.Max, "max", ops.BulkMaxDefault, fmt.Sprintf("with --all: refuse, before any change, a selection that matches more attempts than this (1..%d)", ops.MaxBulkMax))
	cmd.Flags().IntVar(&opts.BatchSize, "batch", ops.BulkBatchDefault, fmt.Sprintf("with --all: attempts per batch, one transaction each (1..%d)", ops.MaxBulkBatch))
	sel.register(cmd.Flags(), 100)
	return cmd
}
