// Package ops is what the operator commands (`kfsdb attempts …`) and the
// web console (`kfsdb console`) share: how an attempt is shown (never its
// lease token, which would let a reader act as the worker), the timeline
// its timestamps give, and the three operator actions, applied only
// through repo's guarded transitions and only to the row version the
// operator saw: on one attempt, or on every match of a filter (bulk.go:
// a dry run, then batches), and the changes of a tenant's limits of
// direct delivery (tenant.go).
package ops

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/knowledgefs/kfsdb/kfstype"
	"github.com/knowledgefs/kfsdb/repo"
)

// Action is an operator action on one attempt.
type Action string

// The actions.
const (
	// Cancel ends a live attempt as canceled (repo.Cancel).
	Cancel Action = "cancel"
	// Retry runs a failed attempt again (repo.RetryFailed).
	Retry Action = "retry"
	// Supersede ends a live attempt as superseded (repo.Supersede).
	Supersede Action = "supersede"
)

// Actions lists the actions in the order pages and help show them.
func Actions() []Action { return []Action{Cancel, Retry, Supersede} }

// ErrUnknownAction is returned by ParseAction.
var ErrUnknownAction = errors.New("unknown action")

// ParseAction returns the action s names.
func ParseAction(s string) (Action, error) {
	for _, a := range Actions() {
		if string(a) == s {
			return a, nil
		}
	}
	return "", fmt.Errorf("%w %q: want cancel, retry or supersede", ErrUnknownAction, s)
}

// Target is the run state an applied action leaves.
func (a Action) Target() kfstype.RunState {
	switch a {
	case Cancel:
		return kfstype.RunStateCanceled
	case Supersede:
		return kfstype.RunStateSuperseded
	default:
		return kfstype.RunStateDispatchPending
	}
}

// Check says whether a applies to an attempt in its current state, and
// why not when it does not. It predicts what the guarded statement will
// do with this row version; the statement decides.
func (a Action) Check(att *kfstype.Attempt) (ok bool, why string) {
	switch a {
	case Cancel, Supersede:
		if att.RunState.Live() {
			return true, ""
		}
		return false, fmt.Sprintf("the attempt is already %s (only a live attempt can be %s)", att.RunState, a.pastTense())
	case Retry:
		if att.RunState == kfstype.RunStateFailed {
			return true, ""
		}
		return false, fmt.Sprintf("the attempt is %s (only a failed attempt can be retried)", att.RunState)
	}
	return false, "unknown action"
}

func (a Action) pastTense() string {
	switch a {
	case Cancel:
		return "canceled"
	case Supersede:
		return "superseded"
	}
	return "retried"
}

// Apply runs a on att through repo, refusing with repo.ErrStaleRowVersion
// when the row changed since att was read. reason is stored for cancel
// and supersede ("" stores none).
func Apply(ctx context.Context, r *repo.Repo, db repo.DBTX, a Action, att *kfstype.Attempt, reason string) (*kfstype.Attempt, error) {
	version := att.RowVersion
	ref := repo.AttemptRef{TenantID: att.TenantID, KnowledgeSpaceID: att.KnowledgeSpaceID, AttemptID: att.ID, ExpectedRowVersion: &version}
	var why *string
	if reason != "" {
		why = &reason
	}
	switch a {
	case Cancel:
		return r.Cancel(ctx, db, &repo.CancelParams{AttemptRef: ref, Reason: why})
	case Supersede:
		return r.Supersede(ctx, db, &repo.SupersedeParams{AttemptRef: ref, Reason: why})
	case Retry:
		return r.RetryFailed(ctx, db, &repo.RetryFailedParams{AttemptRef: ref})
	}
	return nil, fmt.Errorf("%w %q", ErrUnknownAction, a)
}

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
func Plan(a Action, att *kfstype.Attempt) Result {
	res := Result{AttemptID: att.ID, Action: a, From: att.RunState, RowVersion: att.RowVersion}
	if ok, why := a.Check(att); !ok {
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

// Event is one point of an attempt's timeline.
type Event struct {
	At   time.Time `json:"at"`
	What string    `json:"what"`
}

// Timeline lists what the attempt's and its outbox row's timestamps say
// happened, oldest first. Times in the future (a retry, a lease's expiry)
// are included: they say what will happen.
func Timeline(a *kfstype.Attempt, o *kfstype.OutboxMessage) []Event {
	ev := []Event{{a.CreatedAt, "started (attempt and outbox row created)"}}
	add := func(t *time.Time, what string) {
		if t != nil {
			ev = append(ev, Event{*t, what})
		}
	}
	add(a.StartedAt, "first leased by a worker")
	add(a.HeartbeatAt, "last heartbeat")
	if a.RunState == kfstype.RunStateRunning {
		add(a.LeaseExpiresAt, "lease expires")
	}
	add(a.RetryAt, "retry due")
	if o != nil {
		add(o.DeliveredAt, fmt.Sprintf("last delivered (dispatch %d)", o.DispatchAttempts))
		if o.Status == kfstype.OutboxStatusDispatching {
			add(o.LockedUntil, "relay lock expires")
		}
		switch o.Status {
		case kfstype.OutboxStatusPending, kfstype.OutboxStatusDispatched, kfstype.OutboxStatusLeased:
			// The relay or a fetch takes the row again at available_at.
			ev = append(ev, Event{o.AvailableAt, fmt.Sprintf("outbox row (%s) due", o.Status)})
		}
	}
	add(a.CompletedAt, "ended "+string(a.RunState))
	ev = append(ev, Event{a.UpdatedAt, fmt.Sprintf("last written (row version %d)", a.RowVersion)})
	sort.SliceStable(ev, func(i, j int) bool { return ev[i].At.Before(ev[j].At) })
	return ev
}

// ErrBadCursor is returned by DecodeCursor.
var ErrBadCursor = errors.New("bad cursor")

// EncodeCursor writes a page cursor as an opaque token for a command line
// or a URL: "l.<id>" for a live attempt, "t.<completed_at ns>.<id>" for a
// terminal one. nil encodes as "".
func EncodeCursor(c *repo.AttemptCursor) string {
	if c == nil {
		return ""
	}
	if c.CompletedAt == nil {
		return "l." + c.ID.String()
	}
	return fmt.Sprintf("t.%d.%s", c.CompletedAt.UnixNano(), c.ID)
}

// DecodeCursor reads EncodeCursor's token ("" is nil: the first page).
func DecodeCursor(s string) (*repo.AttemptCursor, error) {
	if s == "" {
		return nil, nil
	}
	parts := strings.Split(s, ".")
	switch {
	case len(parts) == 2 && parts[0] == "l":
		id, err := uuid.Parse(parts[1])
		if err != nil {
			return nil, fmt.Errorf("%w %q", ErrBadCursor, s)
		}
		return &repo.AttemptCursor{ID: id}, nil
	case len(parts) == 3 && parts[0] == "t":
		ns, err1 := strconv.ParseInt(parts[1], 10, 64)
		id, err2 := uuid.Parse(parts[2])
		if err1 != nil || err2 != nil {
			return nil, fmt.Errorf("%w %q", ErrBadCursor, s)
		}
		t := time.Unix(0, ns).UTC()
		return &repo.AttemptCursor{CompletedAt: &t, ID: id}, nil
	}
	return nil, fmt.Errorf("%w %q", ErrBadCursor, s)
}

// ParseStates reads a comma-separated list of run states ("" is every
// state).
func ParseStates(s string) ([]kfstype.RunState, error) {
	if s == "" {
		return kfstype.RunStates(), nil
	}
	var out []kfstype.RunState
	seen := map[kfstype.RunState]bool{}
	for _, name := range strings.Split(s, ",") {
		st := kfstype.RunState(strings.TrimSpace(name))
		if !slices.Contains(kfstype.RunStates(), st) {
			return nil, fmt.Errorf("unknown run state %q: want one of %v", st, kfstype.RunStates())
		}
		if !seen[st] {
			seen[st] = true
			out = append(out, st)
		}
	}
	return out, nil
}
