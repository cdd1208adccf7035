package ops

// The operator actions on an attempt, declared once. Each row of actions
// is one action: its name, the run states it applies to, the guarded repo
// transition that applies it, and the words the CLI, the console and the
// docs show. Nothing else lists them: `kfsdb attempts NAME` is built from
// each row (cli/attempt_actions.go), the console's buttons, confirmation
// pages, bulk buttons and flashes read them (console/attempt.go,
// console/bulk.go, console/pages.go), and docs/OPERATING.md's table of
// actions is ActionsMarkdown, checked by actions_test.go.
//
// Adding an action (docs/DEVELOPING.md, "Adding an operator action or a
// transition"): its guarded SQL in db/queries, its repo method, one row
// below, its tests (tests/cli, tests/consolehttp).
//
// The actions on a tenant's limits are the other table, in
// tenant_actions.go. Purge is no row of either: it moves no attempt from
// a state to another at a version read, but deletes every terminal
// attempt past a retention, by age, tenant by tenant, in batches, and
// has no console button; it is its own command, `kfsdb purge`, declared
// in cli/operate.go (PurgeOpts, over repo.Purge and repo.PurgeTenants).

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/knowledgefs/kfsdb/kfstype"
	"github.com/knowledgefs/kfsdb/repo"
)

// Action is an operator action on one attempt, by its name.
type Action string

// The actions, in the order pages and help show them.
const (
	// Cancel ends a live attempt as canceled (repo.Cancel).
	Cancel Action = "cancel"
	// Retry runs a failed attempt again (repo.RetryFailed).
	Retry Action = "retry"
	// Supersede ends a live attempt as superseded (repo.Supersede).
	Supersede Action = "supersede"
	// Release makes a deferred start's outbox row due now
	// (repo.ReleaseDeferred).
	Release Action = "release"
)

// ActionSpec is one operator action on an attempt: a row of the table
// that the CLI, the console and the docs read.
type ActionSpec struct {
	// Name is the action: `kfsdb attempts NAME`, the console's action=
	// and its button's class, the audit line's action (bulk-NAME for a
	// bulk action's summary line), the flash keys NAME-applied,
	// NAME-changed and NAME-refused.
	Name Action
	// From are the run states the action applies to: Check refuses an
	// attempt in any other, in Refusal's words, before any statement.
	From []kfstype.RunState
	// To is the run state the applied action leaves.
	To kfstype.RunState
	// Refusal is Check's reason for an attempt in a state not in From;
	// %s is that state.
	Refusal string
	// Outbox, when set, is a further condition on the attempt's outbox
	// row, checked where the row was read (CheckRow: the console's
	// attempt and confirmation pages); it returns the reason it does not
	// hold. Nil: none.
	Outbox func(o *kfstype.OutboxMessage) (ok bool, why string)
	// StoresReason says that the operator's reason is stored with the
	// attempt (repo's Reason), not only recorded in the audit line.
	StoresReason bool
	// Bulk says that the action is offered on every match of a filter
	// (the console's bulk buttons, the CLI's --all, PlanBulk): only an
	// action whose Check, on the attempt alone, predicts the guarded
	// statement, since a dry run reads no outbox row.
	Bulk bool
	// Label is the console's button ("…" follows it).
	Label string
	// Effect, when set, is what the console's confirmation page says the
	// action does; "": "NAME moves it to To".
	Effect string
	// Does says what the action does in a few words, for the docs'
	// table.
	Does string
	// Apply runs the guarded repo transition on ref, the attempt at the
	// row version read; reason is nil when none was given (and is stored
	// only when StoresReason).
	Apply func(ctx context.Context, r *repo.Repo, db repo.DBTX, ref repo.AttemptRef, reason *string) (*kfstype.Attempt, error)
}

// actions is the table of operator actions, in the order pages and help
// show them.
var actions = []ActionSpec{
	{
		Name:         Cancel,
		From:         liveStates(),
		To:           kfstype.RunStateCanceled,
		Refusal:      "the attempt is already %s (only a live attempt can be canceled)",
		StoresReason: true,
		Bulk:         true,
		Label:        "cancel",
		Does:         "ends a live attempt as canceled, its outbox row too; the reason is stored as its last error (CANCELED)",
		Apply: func(ctx context.Context, r *repo.Repo, db repo.DBTX, ref repo.AttemptRef, reason *string) (*kfstype.Attempt, error) {
			return r.Cancel(ctx, db, &repo.CancelParams{AttemptRef: ref, Reason: reason})
		},
	},
	{
		Name:    Retry,
		From:    []kfstype.RunState{kfstype.RunStateFailed},
		To:      kfstype.RunStateDispatchPending,
		Refusal: "the attempt is %s (only a failed attempt can be retried)",
		Bulk:    true,
		Label:   "retry",
		Does:    "runs a failed attempt again in place: dispatch_pending, execution attempts reset, checkpoint kept, its outbox row pending again",
		Apply: func(ctx context.Context, r *repo.Repo, db repo.DBTX, ref repo.AttemptRef, _ *string) (*kfstype.Attempt, error) {
			return r.RetryFailed(ctx, db, &repo.RetryFailedParams{AttemptRef: ref})
		},
	},
	{
		Name:         Supersede,
		From:         liveStates(),
		To:           kfstype.RunStateSuperseded,
		Refusal:      "the attempt is already %s (only a live attempt can be superseded)",
		StoresReason: true,
		Bulk:         true,
		Label:        "supersede",
		Does:         "ends a live attempt as superseded (a newer version made it moot), its outbox row too; the reason is stored as its last error (SUPERSEDED)",
		Apply: func(ctx context.Context, r *repo.Repo, db repo.DBTX, ref repo.AttemptRef, reason *string) (*kfstype.Attempt, error) {
			return r.Supersede(ctx, db, &repo.SupersedeParams{AttemptRef: ref, Reason: reason})
		},
	},
	{
		Name:    Release,
		From:    []kfstype.RunState{kfstype.RunStateDispatchPending},
		To:      kfstype.RunStateDispatchPending,
		Refusal: "the attempt is %s (only a dispatch_pending attempt whose start was deferred can be released)",
		Outbox: func(o *kfstype.OutboxMessage) (bool, string) {
			if o.Status == kfstype.OutboxStatusPending && o.AvailableAt.Equal(kfstype.Forever) {
				return true, ""
			}
			return false, "its outbox row is not deferred (only a deferred start can be released)"
		},
		Label:  "release",
		Effect: "release makes its deferred outbox row due now: the relay or a worker's fetch takes it",
		Does:   "makes a deferred start's outbox row due now (the attempt stays dispatch_pending)",
		Apply: func(ctx context.Context, r *repo.Repo, db repo.DBTX, ref repo.AttemptRef, _ *string) (*kfstype.Attempt, error) {
			return r.ReleaseDeferred(ctx, db, &repo.ReleaseDeferredParams{AttemptRef: ref})
		},
	},
}

// liveStates are the run states in which an attempt is live.
func liveStates() []kfstype.RunState {
	var out []kfstype.RunState
	for _, s := range kfstype.RunStates() {
		if s.Live() {
			out = append(out, s)
		}
	}
	return out
}

// ActionSpecs returns the table of actions, in the order pages and help
// show them.
func ActionSpecs() []ActionSpec { return slices.Clone(actions) }

// Actions lists the actions in the order pages and help show them.
func Actions() []Action {
	out := make([]Action, len(actions))
	for i, spec := range actions {
		out[i] = spec.Name
	}
	return out
}

// BulkActions lists the actions offered on every match of a filter
// (ActionSpec.Bulk), in the same order.
func BulkActions() []Action {
	var out []Action
	for _, spec := range actions {
		if spec.Bulk {
			out = append(out, spec.Name)
		}
	}
	return out
}

// OrList writes names as "a, b or c", the way usage errors list choices.
func OrList[S ~string](names []S) string {
	parts := make([]string, len(names))
	for i, n := range names {
		parts[i] = string(n)
	}
	if len(parts) < 2 {
		return strings.Join(parts, "")
	}
	return strings.Join(parts[:len(parts)-1], ", ") + " or " + parts[len(parts)-1]
}

// ErrUnknownAction is returned by ParseAction.
var ErrUnknownAction = errors.New("unknown action")

// ParseAction returns the action s names.
func ParseAction(s string) (Action, error) {
	if _, ok := lookup(Action(s)); ok {
		return Action(s), nil
	}
	return "", fmt.Errorf("%w %q: want %s", ErrUnknownAction, s, OrList(Actions()))
}

// lookup is a's row of the table; ok is false for an unknown action.
func lookup(a Action) (spec ActionSpec, ok bool) {
	for _, spec := range actions {
		if spec.Name == a {
			return spec, true
		}
	}
	return ActionSpec{}, false
}

// Spec is a's row of the table (the zero ActionSpec for an unknown
// action): what templates read, as {{.Spec.Label}}.
func (a Action) Spec() ActionSpec {
	spec, _ := lookup(a)
	return spec
}

// Target is the run state an applied action leaves ("" for an unknown
// action).
func (a Action) Target() kfstype.RunState { return a.Spec().To }

// Check says whether a applies to an attempt in its current state, and
// why not when it does not. It predicts what the guarded statement will
// do with this row version; the statement decides.
func (a Action) Check(att *kfstype.Attempt) (ok bool, why string) {
	return a.CheckRow(att, nil)
}

// CheckRow is Check with the attempt's outbox row, when it was read (nil:
// the attempt alone), which an action's Outbox condition reads too.
func (a Action) CheckRow(att *kfstype.Attempt, o *kfstype.OutboxMessage) (ok bool, why string) {
	spec, known := lookup(a)
	switch {
	case !known:
		return false, "unknown action"
	case !slices.Contains(spec.From, att.RunState):
		return false, fmt.Sprintf(spec.Refusal, att.RunState)
	case o != nil && spec.Outbox != nil:
		return spec.Outbox(o)
	}
	return true, ""
}

// Apply runs a on att through repo, refusing with repo.ErrStaleRowVersion
// when the row changed since att was read. reason is stored by the
// actions that store one (ActionSpec.StoresReason; "" stores none).
func Apply(ctx context.Context, r *repo.Repo, db repo.DBTX, a Action, att *kfstype.Attempt, reason string) (*kfstype.Attempt, error) {
	spec, ok := lookup(a)
	if !ok {
		return nil, fmt.Errorf("%w %q", ErrUnknownAction, a)
	}
	version := att.RowVersion
	ref := repo.AttemptRef{TenantID: att.TenantID, KnowledgeSpaceID: att.KnowledgeSpaceID, AttemptID: att.ID, ExpectedRowVersion: &version}
	var why *string
	if reason != "" {
		why = &reason
	}
	return spec.Apply(ctx, r, db, ref, why)
}

// ActionsMarkdown is the table of actions as docs/OPERATING.md shows it
// (actions_test.go checks that it does).
func ActionsMarkdown() string {
	var b strings.Builder
	b.WriteString("| action | applies to | leaves | reason stored | every match (`--all`, bulk) | what it does |\n")
	b.WriteString("|---|---|---|---|---|---|\n")
	yes := func(v bool) string {
		if v {
			return "yes"
		}
		return "no"
	}
	for _, spec := range actions {
		from := make([]string, len(spec.From))
		for i, s := range spec.From {
			from[i] = string(s)
		}
		fmt.Fprintf(&b, "| `%s` | %s | %s | %s | %s | %s |\n", spec.Name, strings.Join(from, ", "), spec.To,
			yes(spec.StoresReason), yes(spec.Bulk), spec.Does)
	}
	return b.String()
}
