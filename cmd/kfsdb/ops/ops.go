// Package ops is what the operator commands (`kfsdb attempts …`,
// `kfsdb tenant …`) and the web console (`kfsdb console`) share. Where
// each part is:
//
//   - actions.go: the operator actions on an attempt (cancel, retry,
//     supersede, release), one table row each: name, states, repo
//     transition, words. The CLI's commands, the console's buttons and the
//     docs' table are read from it; adding an action adds a row there.
//   - ops.go: one action on one attempt, applied only through repo's
//     guarded transition and only to the row version the operator saw
//     (Do), or planned (Plan), and why a refusal happened.
//   - bulk.go: one action on every match of a filter: a dry run, then
//     batches.
//   - list.go: the filter, page cursors and run states that select a
//     tenant's attempts.
//   - view.go: how an attempt is shown (never its lease token, which would
//     let a reader act as the worker) and the timeline its timestamps give.
//   - tenant.go: the changes of a tenant's limits of direct delivery.
//   - audit.go: the audit line every change writes.
package ops

import (
	"context"
	"errors"
	"fmt"

	"github.com/google/uuid"

	"github.com/knowledgefs/kfsdb/kfstype"
	"github.com/knowledgefs/kfsdb/repo"
)

// Outcomes of an action on one attempt.
const (
	OutcomeApplied    = "applied"
	OutcomeWouldApply = "would apply"
	OutcomeRefused    = "refused"
)

// Result is what an action did (or, in a dry run, would do) to one
// attempt. Its JSON is the `--json` schema of the action commands.
type Result struct {
	AttemptID uuid.UUID `json:"attempt_id"`
	Action    Action    `json:"action"`
	// From is the state the operator saw ("" when the attempt was not
	// found); To the state after (the predicted one in a dry run; From
	// when refused).
	From kfstype.RunState `json:"from,omitempty"`
	To   kfstype.RunState `json:"to,omitempty"`
	// Outcome is applied, would apply or refused (or, in a bulk action,
	// not reached); Reason says why a refusal happened, in words, and
	// Code names its kind (RefusedStale, RefusedState, RefusedNotFound,
	// RefusedLiveAttempt).
	Outcome string `json:"outcome"`
	Reason  string `json:"reason,omitempty"`
	Code    string `json:"code,omitempty"`
	// RowVersion is the row's version after the action (before it in a
	// dry run or a refusal).
	RowVersion int32 `json:"row_version,omitempty"`
}

// Plan is a dry run: what a would do to att, changing nothing.
func Plan(a Action, att *kfstype.Attempt) Result { return PlanRow(a, att, nil) }

// PlanRow is Plan with the attempt's outbox row, when it was read (nil:
// the attempt alone; Action.CheckRow).
func PlanRow(a Action, att *kfstype.Attempt, o *kfstype.OutboxMessage) Result {
	res := Result{AttemptID: att.ID, Action: a, From: att.RunState, RowVersion: att.RowVersion}
	if ok, why := a.CheckRow(att, o); !ok {
		res.To, res.Outcome, res.Reason, res.Code = att.RunState, OutcomeRefused, why, RefusedState
		return res
	}
	res.To, res.Outcome = a.Target(), OutcomeWouldApply
	return res
}

// Do applies a to att and reports it as a Result; a refusal by the
// database is a Result too (Outcome refused), other errors are returned.
func Do(ctx context.Context, r *repo.Repo, db repo.DBTX, a Action, att *kfstype.Attempt, reason string) (Result, error) {
	res := Result{AttemptID: att.ID, Action: a, From: att.RunState, To: att.RunState, RowVersion: att.RowVersion}
	after, err := Apply(ctx, r, db, a, att, reason)
	if err != nil {
		if why, refused := Refusal(err); refused {
			res.Outcome, res.Reason, res.Code = OutcomeRefused, why, RefusalCode(err)
			return res, nil
		}
		return res, err
	}
	res.To, res.Outcome, res.RowVersion = after.RunState, OutcomeApplied, after.RowVersion
	return res, nil
}

// Refusal says in words why repo refused an action, and whether err is
// such a refusal (rather than a failure to reach the database).
func Refusal(err error) (string, bool) {
	var te *repo.TransitionError
	switch {
	case errors.As(err, &te):
		if te.Reason != "" {
			return fmt.Sprintf("refused in state %s: %s", te.From, te.Reason), true
		}
		return fmt.Sprintf("refused in state %s", te.From), true
	case errors.Is(err, repo.ErrStaleRowVersion):
		return "the attempt changed since it was read (another writer got there first); look again", true
	case errors.Is(err, repo.ErrNotFound):
		return "no such attempt for this tenant", true
	case errors.Is(err, repo.ErrLiveAttemptExists):
		return "another attempt is live for this document version", true
	case errors.Is(err, repo.ErrInvalidTransition):
		return "not allowed in the attempt's state", true
	}
	return "", false
}

// Refusal codes: Result.Code of a refused action.
const (
	// RefusedStale: the attempt changed since it was read (its row
	// version moved): repo.ErrStaleRowVersion.
	RefusedStale = "stale_row_version"
	// RefusedState: the action is not allowed in the attempt's state
	// (*repo.TransitionError, repo.ErrInvalidTransition, or Check's
	// prediction).
	RefusedState = "invalid_transition"
	// RefusedNotFound: no such attempt for the tenant (purged, or
	// another tenant's): repo.ErrNotFound.
	RefusedNotFound = "not_found"
	// RefusedLiveAttempt: a retry found another live attempt for the
	// document version: repo.ErrLiveAttemptExists.
	RefusedLiveAttempt = "live_attempt_exists"
)

// RefusalCode names the kind of refusal err is ("" when it is none).
func RefusalCode(err error) string {
	var te *repo.TransitionError
	switch {
	case errors.As(err, &te), errors.Is(err, repo.ErrInvalidTransition):
		return RefusedState
	case errors.Is(err, repo.ErrStaleRowVersion):
		return RefusedStale
	case errors.Is(err, repo.ErrNotFound):
		return RefusedNotFound
	case errors.Is(err, repo.ErrLiveAttemptExists):
		return RefusedLiveAttempt
	}
	return ""
}
