package cli

import (
	"bufio"
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
	switch {
	case o.TenantID == "":
		return errors.New("invalid options: TenantID is required (--tenant): actions are confined to one tenant")
	case o.Selection != nil && len(o.IDs) > 0:
		return errors.New("invalid options: give IDs or a Selection, not both")
	case o.Selection != nil && o.Selection.TenantID != o.TenantID:
		return errors.New("invalid options: Selection.TenantID must be TenantID")
	case o.Selection == nil && (len(o.IDs) == 0 || len(o.IDs) > MaxActionAttempts):
		return fmt.Errorf("invalid options: give 1..%d attempt ids, got %d", MaxActionAttempts, len(o.IDs))
	case o.Out == nil:
		return errors.New("invalid options: Out is required")
	case !o.DryRun && !o.Yes && (len(o.IDs) > 1 || o.Selection != nil) && o.In == nil:
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
	ids := opts.IDs
	if opts.Selection != nil {
		page, err := r.ListAttempts(ctx, pool, opts.Selection)
		if err != nil {
			return nil, err
		}
		for _, a := range page.Attempts {
			ids = append(ids, a.ID)
		}
		if len(ids) == 0 {
			fmt.Fprintln(opts.Out, "no attempt matches the selection")
			return nil, nil
		}
	}
	read := make([]*kfstype.Attempt, len(ids))
	results := make([]ops.Result, len(ids))
	for i, id := range ids {
		a, err := r.GetAttempt(ctx, pool, &repo.GetAttemptParams{TenantID: opts.TenantID, AttemptID: id})
		switch {
		case errors.Is(err, repo.ErrNotFound):
			results[i] = ops.Result{AttemptID: id, Action: opts.Action, Outcome: ops.OutcomeRefused, Reason: "no such attempt for this tenant"}
			continue
		case err != nil:
			return nil, err
		}
		read[i], results[i] = a, ops.Plan(opts.Action, a)
	}
	if !opts.DryRun {
		if err := confirm(opts, results); err != nil {
			return results, err
		}
		role := ""
		if opts.Audit != nil {
			role = poolRole(ctx, pool)
		}
		for i, a := range read {
			if a != nil {
				var err error
				if results[i], err = ops.Do(ctx, r, pool, opts.Action, a, opts.Reason); err != nil {
					audit(ctx, opts, role, ops.Result{AttemptID: a.ID, Action: opts.Action, From: a.RunState, Outcome: ops.OutcomeRefused, Reason: "database error"})
					return results, err
				}
			}
			audit(ctx, opts, role, results[i])
		}
	}
	if err := writeResults(opts.Out, opts.JSON, results); err != nil {
		return results, err
	}
	refused := 0
	for _, res := range results {
		if res.Outcome == ops.OutcomeRefused {
			refused++
		}
	}
	if refused > 0 {
		return results, fmt.Errorf("%w: %d of %d attempts", ErrRefused, refused, len(results))
	}
	return results, nil
}

// audit writes res's audit line to opts.Audit, if set: who is the
// operating system user and role the database role, from where this
// host, why opts.Reason.
func audit(ctx context.Context, opts *AttemptActionOpts, role string, res ops.Result) {
	writeAudit(ctx, opts.Audit, ops.AuditLine{DBRole: role, Tenant: opts.TenantID, Attempt: res.AttemptID.String(), Action: string(res.Action),
		From: string(res.From), To: string(res.To), Result: res.Outcome, Reason: res.Reason, OperatorReason: opts.Reason})
}

// confirm asks before acting on more than one attempt, showing the plan.
func confirm(opts *AttemptActionOpts, plan []ops.Result) error {
	if opts.Yes || len(plan) < 2 {
		return nil
	}
	would := 0
	for _, p := range plan {
		if p.Outcome == ops.OutcomeWouldApply {
			would++
		}
	}
	printRow(opts.Out, "%s %d of %d attempts of tenant %s? Type yes to go on: ", opts.Action, would, len(plan), opts.TenantID)
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
// the attempt ids given, or on one page of a selection (--state).
func newAttemptsActionCommand(r *runner, af *attemptsFlags, action ops.Action) *cobra.Command {
	opts := &AttemptActionOpts{Action: action}
	var sel selection
	cmd := &cobra.Command{
		Use:   fmt.Sprintf("%s --tenant T [--reason R] [--dry-run] [--yes] ATTEMPT_ID...|--state S[,S]", action),
		Short: fmt.Sprintf("%s attempts through the guarded transition, by id or by selection", action),
		Long: fmt.Sprintf("%s the attempts given by id, or one page of a selection (--state, and --space, --limit, --after), "+
			"each at the row version read: one that changed meanwhile is refused. More than one attempt asks for yes unless --yes. "+
			"Each attempt acted on writes an audit line (stderr, --audit-file, --audit-syslog) with who, --reason and the result.", action),
		Args: cobra.ArbitraryArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(args) > 0 && (sel.states != "" || sel.space != "" || sel.after != "") {
				return fmt.Errorf("%w: give attempt ids or a selection (--state, --space), not both", ErrUsage)
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
			if len(args) == 0 && sel.states != "" {
				// A bulk action on a selection: AttemptAction reads one
				// page of it, then acts on each attempt at the version read.
				if opts.TenantID == "" {
					return fmt.Errorf("%w: --tenant is required", ErrUsage)
				}
				var err error
				if opts.Selection, err = sel.params(opts.TenantID); err != nil {
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
	sel.register(cmd.Flags(), 100)
	return cmd
}
