package cli

// `kfsdb attempts NAME --all`: one action on every match of a filter, as
// the console's bulk actions (ops.PlanBulk, ops.RunBulk).

import (
	"cmp"
	"context"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/knowledgefs/kfsdb/cmd/kfsdb/ops"
	"github.com/knowledgefs/kfsdb/kfstype"
	"github.com/knowledgefs/kfsdb/repo"
)

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
