package cli

import (
	"bufio"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/user"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/knowledgefs/kfsdb/cmd/kfsdb/ops"
	"github.com/knowledgefs/kfsdb/kfstype"
	"github.com/knowledgefs/kfsdb/migrate/redact"
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
	// IDs are the attempts to act on (1..MaxActionAttempts).
	IDs []uuid.UUID
	// Reason is stored with a cancel or supersede (optional).
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
	// attempts` sends them to stderr. Defaults to nil: none.
	Audit io.Writer
}

// MaxActionAttempts bounds one action command.
const MaxActionAttempts = 1000

// Validate reports the first missing or invalid field.
func (o *AttemptActionOpts) Validate() error {
	if err := validateDatabaseURL(o.DatabaseURL); err != nil {
		return err
	}
	if _, err := ops.ParseAction(string(o.Action)); err != nil {
		return fmt.Errorf("invalid options: Action: %w", err)
	}
	switch {
	case o.TenantID == "":
		return errors.New("invalid options: TenantID is required (--tenant): actions are confined to one tenant")
	case len(o.IDs) == 0 || len(o.IDs) > MaxActionAttempts:
		return fmt.Errorf("invalid options: give 1..%d attempt ids, got %d", MaxActionAttempts, len(o.IDs))
	case o.Out == nil:
		return errors.New("invalid options: Out is required")
	case !o.DryRun && !o.Yes && len(o.IDs) > 1 && o.In == nil:
		return errors.New("invalid options: In is required to confirm a bulk action (or set Yes)")
	}
	return nil
}

// AttemptAction applies (or with DryRun plans) an operator action on each
// attempt, through repo's guarded transitions and only to the row version
// it read: an attempt that changed meanwhile is refused, not overwritten.
// It returns the results, and an error wrapping ErrRefused when any
// attempt was refused.
func AttemptAction(ctx context.Context, opts *AttemptActionOpts) ([]ops.Result, error) {
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	res, err := attemptAction(ctx, opts)
	if err != nil && !errors.Is(err, ErrRefused) && !errors.Is(err, ErrAborted) {
		return res, errors.New(redact.Text(err.Error(), opts.DatabaseURL))
	}
	return res, err
}

func attemptAction(ctx context.Context, opts *AttemptActionOpts) ([]ops.Result, error) {
	pool, err := connectOperator(ctx, opts.DatabaseURL)
	if err != nil {
		return nil, err
	}
	defer pool.Close()
	r := repo.New(nil)
	read := make([]*kfstype.Attempt, len(opts.IDs))
	results := make([]ops.Result, len(opts.IDs))
	for i, id := range opts.IDs {
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
		for i, a := range read {
			if a != nil {
				if results[i], err = ops.Do(ctx, r, pool, opts.Action, a, opts.Reason); err != nil {
					audit(ctx, opts, ops.Result{AttemptID: a.ID, Action: opts.Action, From: a.RunState, Outcome: ops.OutcomeRefused, Reason: "database error"})
					return results, err
				}
			}
			audit(ctx, opts, results[i])
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
// operating system user, from where this host.
func audit(ctx context.Context, opts *AttemptActionOpts, res ops.Result) {
	if opts.Audit == nil {
		return
	}
	who := "cli:unknown"
	if u, err := user.Current(); err == nil {
		who = "cli:" + u.Username
	}
	host, _ := os.Hostname()
	ops.AuditLine{Session: who, Remote: host, Tenant: opts.TenantID, Attempt: res.AttemptID.String(), Action: string(res.Action),
		From: string(res.From), To: string(res.To), Result: res.Outcome, Reason: res.Reason}.Log(ctx, slog.New(slog.NewTextHandler(opts.Audit, nil)))
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
	fmt.Fprintf(opts.Out, "%s %d of %d attempts of tenant %s? Type yes to go on: ", opts.Action, would, len(plan), opts.TenantID)
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
		line := fmt.Sprintf("%-9s %s  %s", r.Action, r.AttemptID, r.Outcome)
		if r.From != "" {
			line += fmt.Sprintf(": %s → %s", r.From, r.To)
		}
		if r.Reason != "" {
			line += " (" + r.Reason + ")"
		}
		fmt.Fprintln(w, line)
	}
	return nil
}

func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// connectOperator opens a small pool for an operator command, closed
// with pool.Close.
func connectOperator(ctx context.Context, url string) (*pgxpool.Pool, error) {
	pool, _, _, err := openServedPool(ctx, url, 4, "", nil, nil)
	return pool, err
}

// openPool opens a pool on cfg and pings it, so that a wrong URL or a
// server that is down fails the command at once.
func openPool(ctx context.Context, cfg *pgxpool.Config) (*pgxpool.Pool, error) {
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("could not connect: %w", err)
	}
	if err := pool.Ping(ctx); err != nil {
		pool.Close()
		return nil, fmt.Errorf("could not connect: %w", err)
	}
	return pool, nil
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
	if err := validateDatabaseURL(opts.DatabaseURL); err != nil {
		return nil, err
	}
	if opts.TenantID == "" || opts.Out == nil || opts.ID == uuid.Nil {
		return nil, errors.New("invalid options: TenantID, ID and Out are required")
	}
	pool, err := connectOperator(ctx, opts.DatabaseURL)
	if err != nil {
		return nil, errors.New(redact.Text(err.Error(), opts.DatabaseURL))
	}
	defer pool.Close()
	a, o, err := repo.New(nil).GetAttemptWithOutbox(ctx, pool, &repo.GetAttemptWithOutboxParams{TenantID: opts.TenantID, AttemptID: opts.ID})
	if err != nil {
		return nil, fmt.Errorf("attempt %s of tenant %s: %w", opts.ID, opts.TenantID, err)
	}
	v := ops.ViewOf(a, o)
	v.Timeline = ops.Timeline(a, o)
	if opts.JSON {
		return v, writeJSON(opts.Out, v)
	}
	writeAttemptText(opts.Out, v)
	return v, nil
}

func writeAttemptText(w io.Writer, v *ops.AttemptView) {
	str := func(s *string) string {
		if s == nil {
			return "-"
		}
		return *s
	}
	tm := func(t *time.Time) string {
		if t == nil {
			return "-"
		}
		return t.UTC().Format(time.RFC3339Nano)
	}
	fmt.Fprintf(w, "attempt      %s (tenant %s, space %s)\n", v.ID, v.TenantID, v.KnowledgeSpaceID)
	fmt.Fprintf(w, "document     %s version %d\n", v.DocumentAssetID, v.DocumentVersion)
	fmt.Fprintf(w, "state        %s at checkpoint %s, execution %d of %d, row version %d\n", v.RunState, v.Checkpoint, v.ExecutionAttempts, v.MaxExecutionAttempts, v.RowVersion)
	cand := "-"
	if v.CandidatePublicationID != nil {
		cand = v.CandidatePublicationID.String() + " " + str(v.CandidateFingerprint)
	}
	fmt.Fprintf(w, "candidate    %s\n", cand)
	fmt.Fprintf(w, "worker       %s, lease held %v until %s, heartbeat %s\n", str(v.WorkerID), v.LeaseHeld, tm(v.LeaseExpiresAt), tm(v.HeartbeatAt))
	fmt.Fprintf(w, "last error   %s: %s\n", str(v.LastErrorCode), str(v.LastErrorMessage))
	if o := v.Outbox; o != nil {
		fmt.Fprintf(w, "outbox       %s %s, dispatch %d, available at %s, locked by %s until %s, queue job %s\n",
			o.ID, o.Status, o.DispatchAttempts, o.AvailableAt.UTC().Format(time.RFC3339Nano), str(o.LockedBy), tm(o.LockedUntil), str(o.QueueJobID))
	}
	fmt.Fprintln(w, "timeline")
	for _, e := range v.Timeline {
		fmt.Fprintf(w, "  %s  %s\n", e.At.UTC().Format(time.RFC3339Nano), e.What)
	}
}

func runAttempts(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer, getenv func(string) string) error {
	if len(args) == 0 {
		return fmt.Errorf("%w: attempts needs a subcommand: list, show, cancel, retry or supersede", ErrUsage)
	}
	sub, args := args[0], args[1:]
	fs := flag.NewFlagSet("kfsdb attempts "+sub, flag.ContinueOnError)
	fs.SetOutput(stderr)
	url := fs.String("database-url", "", "PostgreSQL URL; defaults to $"+EnvDatabaseURL)
	tenant := fs.String("tenant", "", "the tenant (required)")
	asJSON := fs.Bool("json", false, "print JSON instead of text")
	switch sub {
	case "show":
		if err := parseCommand(fs, args, "Usage: kfsdb attempts show --tenant T [--json] [--database-url URL] ATTEMPT_ID", 1, "show takes one attempt id"); err != nil {
			return err
		}
		id, err := uuid.Parse(fs.Arg(0))
		if err != nil {
			return fmt.Errorf("%w: attempt id %q is not a UUID", ErrUsage, fs.Arg(0))
		}
		opts := &AttemptShowOpts{DatabaseURL: cmp.Or(*url, getenv(EnvDatabaseURL)), TenantID: *tenant, ID: id, JSON: *asJSON, Out: stdout}
		if opts.TenantID == "" {
			return fmt.Errorf("%w: --tenant is required", ErrUsage)
		}
		if err := validateDatabaseURL(opts.DatabaseURL); err != nil {
			return fmt.Errorf("%w: %w", ErrUsage, err)
		}
		_, err = AttemptShow(ctx, opts)
		return err
	case "list":
		return runAttemptsList(ctx, fs, args, url, tenant, asJSON, stdout, getenv)
	}
	action, err := ops.ParseAction(sub)
	if err != nil {
		return fmt.Errorf("%w: attempts %s: want list, show, cancel, retry or supersede", ErrUsage, sub)
	}
	opts := &AttemptActionOpts{Action: action, In: stdin, Out: stdout, Audit: stderr}
	fs.StringVar(&opts.Reason, "reason", "", "reason stored with a cancel or supersede")
	fs.BoolVar(&opts.DryRun, "dry-run", false, "say what would change, change nothing")
	fs.BoolVar(&opts.Yes, "yes", false, "do not ask before acting on more than one attempt")
	var sel selection
	sel.register(fs, 100)
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "Usage: kfsdb attempts %s --tenant T [--reason R] [--dry-run] [--yes] [--json] [--database-url URL] ATTEMPT_ID...\n", sub)
		fmt.Fprintf(fs.Output(), "   or: kfsdb attempts %s --tenant T --state S[,S] [--space ID] [--limit N] [--after TOKEN] [--dry-run] [--yes] [--json]\n", sub)
		fs.PrintDefaults()
	}
	if err := ParseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 && (sel.states != "" || sel.space != "" || sel.after != "") {
		return fmt.Errorf("%w: give attempt ids or a selection (--state, --space), not both", ErrUsage)
	}
	if action == ops.Retry && opts.Reason != "" {
		return fmt.Errorf("%w: --reason applies to cancel and supersede", ErrUsage)
	}
	for _, arg := range fs.Args() {
		id, err := uuid.Parse(arg)
		if err != nil {
			return fmt.Errorf("%w: attempt id %q is not a UUID", ErrUsage, arg)
		}
		opts.IDs = append(opts.IDs, id)
	}
	opts.DatabaseURL, opts.TenantID, opts.JSON = cmp.Or(*url, getenv(EnvDatabaseURL)), *tenant, *asJSON
	if fs.NArg() == 0 && sel.states != "" {
		// A bulk action on a selection: one page of it, read now; each
		// attempt is then acted on at the version read.
		if opts.TenantID == "" {
			return fmt.Errorf("%w: --tenant is required", ErrUsage)
		}
		p, err := sel.params(opts.TenantID)
		if err != nil {
			return err
		}
		if err := validateDatabaseURL(opts.DatabaseURL); err != nil {
			return fmt.Errorf("%w: %w", ErrUsage, err)
		}
		if err := withOperatorPool(ctx, opts.DatabaseURL, func(db repo.DBTX) error {
			page, err := repo.New(nil).ListAttempts(ctx, db, p)
			if err != nil {
				return err
			}
			for _, a := range page.Attempts {
				opts.IDs = append(opts.IDs, a.ID)
			}
			return nil
		}); err != nil {
			return err
		}
		if len(opts.IDs) == 0 {
			fmt.Fprintln(stdout, "no attempt matches the selection")
			return nil
		}
	}
	if err := opts.Validate(); err != nil {
		return fmt.Errorf("%w: %w", ErrUsage, err)
	}
	_, err = AttemptAction(ctx, opts)
	return err
}
