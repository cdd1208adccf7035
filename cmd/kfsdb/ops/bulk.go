package ops

// Bulk actions: one action on every attempt a filter matches, as the
// console's bulk buttons and `kfsdb attempts ACTION --all` run it, for
// the actions offered on every match (ActionSpec.Bulk). First a dry run (PlanBulk) reads every match once and keeps
// what it read; then RunBulk acts on those attempts, in batches, each
// through its guarded transition at the row version the dry run read: an
// attempt that changed since is skipped and reported with the refusal's
// code, never overwritten, and an attempt that only came to match after
// the dry run is not touched.

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/knowledgefs/kfsdb/kfstype"
	"github.com/knowledgefs/kfsdb/repo"
)

// Bounds of a bulk action.
const (
	// BulkMaxDefault is how many attempts one bulk action may match unless
	// configured otherwise (the console's --bulk-max, the CLI's --max).
	BulkMaxDefault = 10_000
	// MaxBulkMax bounds that setting: a dry run keeps every match's id and
	// row version in memory until it is confirmed.
	MaxBulkMax = 100_000
	// BulkBatchDefault is how many attempts one batch (one transaction)
	// acts on.
	BulkBatchDefault = 100
	// MaxBulkBatch bounds BulkRun.BatchSize: a batch holds the row locks
	// of its attempts until it commits.
	MaxBulkBatch = 1000
)

// Target is an attempt a bulk plan will act on, as the dry run read it.
type Target struct {
	ID, KnowledgeSpaceID uuid.UUID
	// From is the run state read; RowVersion the version the action is
	// applied at.
	From       kfstype.RunState
	RowVersion int32
}

// SampleRow is one attempt of a dry run's sample and what the action
// would do to it.
type SampleRow struct {
	View *AttemptView
	Plan Result
}

// BulkPlan is a bulk action's dry run: the attempts the filter matched,
// read once, and what the action would do to them.
type BulkPlan struct {
	Action Action
	Filter Filter
	// Matched counts the distinct attempts the filter matched.
	Matched int
	// Targets are the matches the action would change, in list order,
	// each to be acted on at the row version read.
	Targets []Target
	// Unchanged counts the matches the action would leave as they are
	// (Action.Check refuses them: a cancel of an ended attempt, a retry
	// of one that did not fail), by run state. They are not acted on: at
	// the version read the guarded statement would refuse them too.
	Unchanged map[kfstype.RunState]int
	// Sample is the first matches, at most the sample size asked for.
	Sample []SampleRow

	sampleSize int
	seen       map[uuid.UUID]bool
}

// NewBulkPlan is an empty plan of action on f's matches, keeping a sample
// of up to sample attempts; Add fills it.
func NewBulkPlan(action Action, f Filter, sample int) *BulkPlan {
	return &BulkPlan{Action: action, Filter: f, Unchanged: map[kfstype.RunState]int{}, sampleSize: sample, seen: map[uuid.UUID]bool{}}
}

// Add plans the action on a, once per attempt (a walk may list an
// attempt twice when it ends during the walk: the first read counts).
func (p *BulkPlan) Add(a *kfstype.Attempt) {
	if p.seen[a.ID] {
		return
	}
	p.seen[a.ID] = true
	p.Matched++
	res := Plan(p.Action, a)
	if len(p.Sample) < p.sampleSize {
		p.Sample = append(p.Sample, SampleRow{View: ViewOf(a, nil), Plan: res})
	}
	if res.Outcome != OutcomeWouldApply {
		p.Unchanged[a.RunState]++
		return
	}
	p.Targets = append(p.Targets, Target{ID: a.ID, KnowledgeSpaceID: a.KnowledgeSpaceID, From: a.RunState, RowVersion: a.RowVersion})
}

// ChangesByState counts the targets by the run state read.
func (p *BulkPlan) ChangesByState() map[kfstype.RunState]int {
	out := map[kfstype.RunState]int{}
	for _, t := range p.Targets {
		out[t.From]++
	}
	return out
}

// TooManyError is PlanBulk's refusal of a filter that matches more
// attempts than one bulk action may act on.
type TooManyError struct {
	// Max is the bound.
	Max int
}

func (e *TooManyError) Error() string {
	return fmt.Sprintf("more than %d attempts match: one bulk action acts on at most %d; narrow the filter (a state, an age, an error code)", e.Max, e.Max)
}

// PlanBulk is a bulk action's dry run: it reads every attempt f matches,
// page by page (repo.ListAttempts, so in list order and on its index),
// and plans action on each, keeping a sample of the first sample. It
// changes nothing. More than max matches is a *TooManyError, read after
// at most max+1 attempts.
//
// Errors: *TooManyError; ErrUnknownAction, also for an action not
// offered on every match (ActionSpec.Bulk); repo's (*repo.InputError for
// a bad filter).
func PlanBulk(ctx context.Context, r *repo.Repo, db repo.DBTX, action Action, f Filter, max, sample int) (*BulkPlan, error) {
	if _, err := ParseAction(string(action)); err != nil {
		return nil, err
	}
	if !action.Spec().Bulk {
		return nil, fmt.Errorf("%w %q on every match: want %s", ErrUnknownAction, action, OrList(BulkActions()))
	}
	plan := NewBulkPlan(action, f, sample)
	var after *repo.AttemptCursor
	for {
		limit := min(repo.MaxListLimit, max+1-plan.Matched)
		page, err := r.ListAttempts(ctx, db, f.Params(after, int32(limit)))
		if err != nil {
			return nil, err
		}
		for _, a := range page.Attempts {
			plan.Add(a)
		}
		if plan.Matched > max {
			return nil, &TooManyError{Max: max}
		}
		if page.Next == nil {
			return plan, nil
		}
		after = page.Next
	}
}

// OutcomeNotReached is the outcome of a bulk target the action never got
// to: the run stopped first (its deadline, a database error).
const OutcomeNotReached = "not reached"

// BulkRun tunes RunBulk.
type BulkRun struct {
	// BatchSize is how many attempts one batch acts on, 1..MaxBulkBatch.
	// Defaults to BulkBatchDefault.
	BatchSize int
	// Reason is stored by the actions that store one
	// (ActionSpec.StoresReason: cancel, supersede). Defaults to "": none.
	Reason string
	// OnBatch, when set, gets each batch's results once the batch is
	// done (committed): where the caller writes their audit lines. batch
	// counts from 1.
	OnBatch func(batch int, results []Result)
}

// BulkReport is what RunBulk did.
type BulkReport struct {
	// Results has one entry per target, in plan order: applied, refused
	// (skipped: the attempt changed since the dry run, Code says how) or
	// not reached.
	Results []Result
	// Applied, Skipped and NotReached count the results by outcome.
	Applied, Skipped, NotReached int
	// SkippedBy counts the skipped targets by refusal code.
	SkippedBy map[string]int
	// Batches is how many batches ran.
	Batches int
}

// Summary is one line of what the run did to plan's matches, for an
// audit line's detail: the filter, the counts, the skips by code.
func (rep *BulkReport) Summary(plan *BulkPlan) string {
	codes := make([]string, 0, len(rep.SkippedBy))
	for code := range rep.SkippedBy {
		codes = append(codes, code)
	}
	slices.Sort(codes)
	skipped := ""
	for i, code := range codes {
		sep := ", "
		if i == 0 {
			sep = " ("
		}
		skipped += fmt.Sprintf("%s%s %d", sep, code, rep.SkippedBy[code])
	}
	if skipped != "" {
		skipped += ")"
	}
	return fmt.Sprintf("filter %s; matched %d, confirmed %d: applied %d, skipped %d%s, not reached %d; %d batches",
		plan.Filter, plan.Matched, len(rep.Results), rep.Applied, rep.Skipped, skipped, rep.NotReached, rep.Batches)
}

// txBeginner is a DBTX that starts transactions: a pool, a connection or
// a transaction (whose Begin is a savepoint).
type txBeginner interface {
	Begin(ctx context.Context) (pgx.Tx, error)
}

// RunBulk applies plan's action to plan's targets in batches, each target
// through its guarded transition (Do) at the row version the dry run
// read. A batch runs in one transaction when db can begin one (one
// commit per batch, not per attempt); if the transaction fails (a retry
// racing a Start aborts it with a unique violation, a deadlock, a
// serialization failure) it is rolled back and the batch is run again
// attempt by attempt, each in its own statement. Between batches it
// checks ctx: when ctx ends it stops, and the targets left are reported
// as not reached. The error is what stopped the run (ctx's, or a
// database error), nil when every target was tried; the report is never
// nil.
func RunBulk(ctx context.Context, r *repo.Repo, db repo.DBTX, plan *BulkPlan, run BulkRun) (*BulkReport, error) {
	size := run.BatchSize
	if size == 0 {
		size = BulkBatchDefault
	}
	rep := &BulkReport{Results: make([]Result, 0, len(plan.Targets)), SkippedBy: map[string]int{}}
	if size < 1 || size > MaxBulkBatch {
		return rep, fmt.Errorf("bulk batch size must be 1..%d, got %d", MaxBulkBatch, size)
	}
	b := &bulkBatch{r: r, db: db, action: plan.Action, tenant: plan.Filter.TenantID, reason: run.Reason}
	for start := 0; start < len(plan.Targets); start += size {
		batch := plan.Targets[start:min(start+size, len(plan.Targets))]
		if err := ctx.Err(); err != nil {
			rep.add(notReached(plan.Action, plan.Targets[start:], err))
			return rep, err
		}
		res, err := b.run(ctx, batch)
		rep.Batches++
		rep.add(res)
		if run.OnBatch != nil {
			run.OnBatch(rep.Batches, res)
		}
		if err != nil {
			rep.add(notReached(plan.Action, plan.Targets[start+len(batch):], err))
			return rep, err
		}
	}
	return rep, nil
}

func (rep *BulkReport) add(results []Result) {
	for _, res := range results {
		rep.Results = append(rep.Results, res)
		switch res.Outcome {
		case OutcomeApplied:
			rep.Applied++
		case OutcomeNotReached:
			rep.NotReached++
		default:
			rep.Skipped++
			rep.SkippedBy[res.Code]++
		}
	}
}

// notReached are the results of targets a stopped run never got to.
func notReached(action Action, targets []Target, why error) []Result {
	out := make([]Result, len(targets))
	for i, t := range targets {
		out[i] = Result{AttemptID: t.ID, Action: action, From: t.From, To: t.From, Outcome: OutcomeNotReached,
			Reason: "the bulk action stopped before it: " + why.Error(), RowVersion: t.RowVersion}
	}
	return out
}

// bulkBatch runs one batch of a bulk action.
type bulkBatch struct {
	r              *repo.Repo
	db             repo.DBTX
	action         Action
	tenant, reason string
}

// run acts on targets in one transaction, or, when that fails and ctx
// has not ended, one by one.
func (b *bulkBatch) run(ctx context.Context, targets []Target) ([]Result, error) {
	if _, ok := b.db.(txBeginner); ok {
		var res []Result
		// A refusal that aborted the transaction (a unique violation)
		// surfaces at the commit, which then rolls back.
		err := InTx(ctx, b.db, func(tx repo.DBTX) (err error) {
			res, err = b.each(ctx, tx, targets)
			return err
		})
		if err == nil {
			return res, nil
		}
		if ctx.Err() != nil {
			return notReached(b.action, targets, err), err
		}
	}
	return b.each(ctx, b.db, targets)
}

// InTx runs fn in a transaction on db when db can begin one (a pool, a
// connection; on a transaction, a savepoint), else on db itself: it
// commits when fn returns nil and rolls back otherwise.
func InTx(ctx context.Context, db repo.DBTX, fn func(repo.DBTX) error) error {
	tb, ok := db.(txBeginner)
	if !ok {
		return fn(db)
	}
	tx, err := tb.Begin(ctx)
	if err != nil {
		return err
	}
	if err = fn(tx); err == nil {
		err = tx.Commit(ctx)
	}
	if err != nil {
		rollbackCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		_ = tx.Rollback(rollbackCtx)
	}
	return err
}

// each acts on the targets in turn on db; on an error that is not a
// refusal it stops, the rest not reached.
func (b *bulkBatch) each(ctx context.Context, db repo.DBTX, targets []Target) ([]Result, error) {
	out := make([]Result, 0, len(targets))
	for i, t := range targets {
		a := &kfstype.Attempt{ID: t.ID, TenantID: b.tenant, KnowledgeSpaceID: t.KnowledgeSpaceID, RunState: t.From, RowVersion: t.RowVersion}
		res, err := Do(ctx, b.r, db, b.action, a, b.reason)
		if err != nil {
			return append(out, notReached(b.action, targets[i:], err)...), err
		}
		out = append(out, res)
	}
	return out, nil
}
