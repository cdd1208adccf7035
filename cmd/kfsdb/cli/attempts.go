package cli

// `kfsdb attempts`: the command tree (its subcommands are list, show and
// one per row of ops' table of actions, attempt_actions.go), and the two
// that read: list, a page of a tenant's attempts a selection picks, and
// show, one attempt with its outbox row and timeline.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/knowledgefs/kfsdb/cmd/kfsdb/cmdkit"
	"github.com/knowledgefs/kfsdb/cmd/kfsdb/ops"
	"github.com/knowledgefs/kfsdb/repo"
)

// newAttemptsCommand is `kfsdb attempts`: list and show read a tenant's
// attempts, the actions of ops' table (cancel, retry, supersede, release)
// act on them, one subcommand each.
func newAttemptsCommand(r *runner) *cobra.Command {
	var af attemptsFlags
	subcommands := append([]string{"list", "show"}, actionNames()...)
	cmd := &cobra.Command{
		Use:   "attempts " + strings.Join(subcommands, "|") + " --tenant T",
		Short: "find, inspect and act on a tenant's attempts through the guarded transitions (filters, pages, --dry-run, --yes, --json)",
		Args:  cobra.ArbitraryArgs,
		RunE: func(_ *cobra.Command, args []string) error {
			if len(args) == 0 {
				return fmt.Errorf("%w: attempts needs a subcommand: %s", ErrUsage, ops.OrList(subcommands))
			}
			return fmt.Errorf("%w: attempts %s: want %s", ErrUsage, args[0], ops.OrList(subcommands))
		},
	}
	cmd.PersistentFlags().StringVar(&af.tenant, "tenant", "", "the tenant (required)")
	cmd.PersistentFlags().BoolVar(&af.json, "json", false, "print JSON instead of text")
	cmd.AddCommand(newAttemptsListCommand(r, &af), newAttemptsShowCommand(r, &af))
	for _, spec := range ops.ActionSpecs() {
		cmd.AddCommand(newAttemptsActionCommand(r, &af, spec))
	}
	return cmd
}

// ListDefault is how many attempts `kfsdb attempts list` prints per page.
const ListDefault = 50

// attemptsPage is the `--json` schema of `kfsdb attempts list`.
type attemptsPage struct {
	Attempts []*ops.AttemptView `json:"attempts"`
	// Next is the --after token of the next page; "" on the last.
	Next string `json:"next"`
}

// attemptsFlags are the persistent flags of `kfsdb attempts`, which every
// attempts subcommand reads.
type attemptsFlags struct {
	tenant string
	json   bool
}

// selection is the filter flags shared by list and the bulk actions.
type selection struct {
	states, space, after, errorCode string
	olderThan, newerThan            time.Duration
	limit                           int
}

func (s *selection) register(fs *pflag.FlagSet, limitDefault int) {
	fs.StringVar(&s.states, "state", "", "comma-separated run states (default: every state)")
	fs.StringVar(&s.space, "space", "", "knowledge space id (default: every space)")
	fs.DurationVar(&s.olderThan, "older-than", 0, "only attempts older than this: ended longer ago, or, while live, created longer ago (e.g. 2h; default: no bound)")
	fs.DurationVar(&s.newerThan, "newer-than", 0, "only attempts at most this old, measured the same way (e.g. 24h; default: no bound)")
	fs.StringVar(&s.errorCode, "error-code", "", "only attempts whose last error code is this (default: any)")
	fs.StringVar(&s.after, "after", "", "page token printed as next by the page before")
	fs.IntVar(&s.limit, "limit", limitDefault, fmt.Sprintf("attempts per page, 1..%d", repo.MaxListLimit))
}

// filtered says whether any filter flag (not a page flag) was given.
func (s *selection) filtered() bool {
	return s.states != "" || s.space != "" || s.olderThan != 0 || s.newerThan != 0 || s.errorCode != ""
}

// filter is the tenant's attempts the filter flags select.
func (s *selection) filter(tenant string) (ops.Filter, error) {
	f := ops.Filter{TenantID: tenant, OlderThan: s.olderThan, NewerThan: s.newerThan, ErrorCode: s.errorCode}
	if s.states != "" {
		var err error
		if f.States, err = ops.ParseStates(s.states); err != nil {
			return ops.Filter{}, fmt.Errorf("%w: --state: %w", ErrUsage, err)
		}
	}
	if s.space != "" {
		id, err := uuid.Parse(s.space)
		if err != nil {
			return ops.Filter{}, fmt.Errorf("%w: --space %q is not a UUID", ErrUsage, s.space)
		}
		f.KnowledgeSpaceID = &id
	}
	if s.olderThan < 0 || s.newerThan < 0 {
		return ops.Filter{}, fmt.Errorf("%w: --older-than and --newer-than must not be negative", ErrUsage)
	}
	return f, nil
}

func (s *selection) params(tenant string) (*repo.ListAttemptsParams, error) {
	f, err := s.filter(tenant)
	if err != nil {
		return nil, err
	}
	if s.limit < 1 || s.limit > repo.MaxListLimit {
		return nil, fmt.Errorf("%w: --limit must be 1..%d", ErrUsage, repo.MaxListLimit)
	}
	after, err := ops.DecodeCursor(s.after)
	if err != nil {
		return nil, fmt.Errorf("%w: --after: %w", ErrUsage, err)
	}
	return f.Params(after, int32(s.limit)), nil
}

// newAttemptsListCommand is `kfsdb attempts list`.
func newAttemptsListCommand(r *runner, af *attemptsFlags) *cobra.Command {
	var sel selection
	cmd := &cobra.Command{
		Use:   "list --tenant T [--state S,S] [--space ID] [--older-than D] [--newer-than D] [--error-code C] [--limit N] [--after TOKEN]",
		Short: "a tenant's attempts, a page at a time, newest first",
		Args:  exactArgs(0, "list takes no arguments"),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if af.tenant == "" {
				return fmt.Errorf("%w: --tenant is required", ErrUsage)
			}
			p, err := sel.params(af.tenant)
			if err != nil {
				return err
			}
			return r.onOperatorPool(cmd, func(ctx context.Context, db repo.DBTX, out io.Writer) error {
				return listAttempts(ctx, db, p, af.json, out)
			})
		},
	}
	sel.register(cmd.Flags(), ListDefault)
	return cmd
}

// listAttempts prints the page of attempts p selects, as text or JSON.
func listAttempts(ctx context.Context, db repo.DBTX, p *repo.ListAttemptsParams, asJSON bool, stdout io.Writer) error {
	page, err := repo.New(nil).ListAttempts(ctx, db, p)
	if err != nil {
		return err
	}
	out := attemptsPage{Attempts: make([]*ops.AttemptView, 0, len(page.Attempts)), Next: ops.EncodeCursor(page.Next)}
	for _, a := range page.Attempts {
		out.Attempts = append(out.Attempts, ops.ViewOf(a, nil))
	}
	if asJSON {
		return writeJSON(stdout, out)
	}
	printRow(stdout, "%-36s  %-16s  %-18s  %4s  %-20s  %s\n", "ATTEMPT", "STATE", "CHECKPOINT", "EXEC", "CREATED", "LAST ERROR")
	for _, v := range out.Attempts {
		code := "-"
		if v.LastErrorCode != nil {
			code = *v.LastErrorCode
		}
		printRow(stdout, "%-36s  %-16s  %-18s  %d/%d  %-20s  %s\n", v.ID, v.RunState, v.Checkpoint,
			v.ExecutionAttempts, v.MaxExecutionAttempts, v.CreatedAt.UTC().Format(time.DateTime), code)
	}
	if out.Next != "" {
		printRow(stdout, "next page: --after %s\n", out.Next)
	}
	return nil
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
			return cmdkit.RunCommand(cmd.Context(), opts, func(ctx context.Context, opts *AttemptShowOpts) error {
				_, err := AttemptShow(ctx, opts)
				return err
			})
		},
	}
}

// AttemptShowOpts are the options of AttemptShow.
type AttemptShowOpts struct {
	DatabaseURL string
	TenantID    string
	ID          uuid.UUID
	JSON        bool
	Out         io.Writer
}

// Validate reports the first missing or invalid field.
func (o *AttemptShowOpts) Validate() error {
	if err := ValidateDatabaseURL(o.DatabaseURL); err != nil {
		return err
	}
	switch {
	case o.TenantID == "":
		return errors.New("invalid options: TenantID is required (--tenant)")
	case o.Out == nil || o.ID == uuid.Nil:
		return errors.New("invalid options: ID and Out are required")
	}
	return nil
}

// AttemptShow prints one attempt of a tenant with its outbox row and
// timeline. A missing attempt (or another tenant's) is repo.ErrNotFound.
func AttemptShow(ctx context.Context, opts *AttemptShowOpts) (*ops.AttemptView, error) {
	if err := opts.Validate(); err != nil {
		return nil, err
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
