package ops

import (
	"os"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/knowledgefs/kfsdb/kfstype"
)

// TestActionsTableRows: every row of the table is whole (the CLI, the
// console and the docs read each field), names are unique and parse
// back, and Check's words are the ones operators have always read.
// Mutation: a row without Apply, or a Refusal without its state, fails
// the first loop; Check ignoring From fails the words.
func TestActionsTableRows(t *testing.T) {
	seen := map[Action]bool{}
	for _, spec := range ActionSpecs() {
		if spec.Name == "" || len(spec.From) == 0 || spec.To == "" || !strings.Contains(spec.Refusal, "%s") ||
			spec.Label == "" || spec.Does == "" || spec.Apply == nil {
			t.Errorf("%q: a row needs Name, From, To, Refusal with %%s, Label, Does and Apply: %+v", spec.Name, spec)
		}
		if seen[spec.Name] {
			t.Errorf("%q is declared twice", spec.Name)
		}
		seen[spec.Name] = true
		if got, err := ParseAction(string(spec.Name)); err != nil || got != spec.Name {
			t.Errorf("ParseAction(%q) = %q, %v", spec.Name, got, err)
		}
	}
	if _, err := ParseAction("delete"); err == nil || err.Error() != `unknown action "delete": want cancel, retry, supersede or release` {
		t.Errorf("ParseAction(delete): %v", err)
	}
	at := func(s kfstype.RunState) *kfstype.Attempt { return &kfstype.Attempt{ID: uuid.New(), RunState: s} }
	for _, tc := range []struct {
		action Action
		state  kfstype.RunState
		why    string
	}{
		{Cancel, kfstype.RunStateRunning, ""},
		{Cancel, kfstype.RunStateSucceeded, "the attempt is already succeeded (only a live attempt can be canceled)"},
		{Supersede, kfstype.RunStateFailed, "the attempt is already failed (only a live attempt can be superseded)"},
		{Retry, kfstype.RunStateFailed, ""},
		{Retry, kfstype.RunStateRunning, "the attempt is running (only a failed attempt can be retried)"},
		{Release, kfstype.RunStateDispatchPending, ""},
		{Release, kfstype.RunStateQueued, "the attempt is queued (only a dispatch_pending attempt whose start was deferred can be released)"},
	} {
		ok, why := tc.action.Check(at(tc.state))
		if ok != (tc.why == "") || why != tc.why {
			t.Errorf("%s of a %s attempt: %v %q, want %q", tc.action, tc.state, ok, why, tc.why)
		}
	}
	if got := Plan(Cancel, at(kfstype.RunStateQueued)); got.Outcome != OutcomeWouldApply || got.To != kfstype.RunStateCanceled {
		t.Errorf("Plan(cancel, queued) = %+v", got)
	}
}

// TestReleaseReadsTheOutboxRow: release applies only to a deferred
// start's row where the row was read, and bulk offers it nowhere (a dry
// run reads no outbox row). Mutation: Outbox ignored by CheckRow fails
// the second case; Release marked Bulk fails the last.
func TestReleaseReadsTheOutboxRow(t *testing.T) {
	a := &kfstype.Attempt{ID: uuid.New(), RunState: kfstype.RunStateDispatchPending}
	deferred := &kfstype.OutboxMessage{Status: kfstype.OutboxStatusPending, AvailableAt: kfstype.Forever}
	due := &kfstype.OutboxMessage{Status: kfstype.OutboxStatusPending, AvailableAt: time.Now()}
	if ok, why := Release.CheckRow(a, deferred); !ok {
		t.Errorf("release of a deferred start refused: %s", why)
	}
	if ok, _ := Release.CheckRow(a, due); ok {
		t.Error("release of a row that is due already is offered")
	}
	if res := PlanRow(Release, a, due); res.Outcome != OutcomeRefused || res.Code != RefusedState {
		t.Errorf("PlanRow(release, due) = %+v", res)
	}
	if ok, _ := Cancel.CheckRow(a, due); !ok {
		t.Error("cancel reads no outbox condition")
	}
	for _, act := range BulkActions() {
		if act == Release {
			t.Error("release is offered on every match")
		}
	}
	if _, err := PlanBulk(t.Context(), nil, nil, Release, Filter{TenantID: "t"}, 10, 1); err == nil {
		t.Error("PlanBulk planned a release")
	}
}

// TestOperatingDocShowsTheTable: docs/OPERATING.md's table of actions is
// the table's (ActionsMarkdown), so that a new row reaches the guide.
func TestOperatingDocShowsTheTable(t *testing.T) {
	requireOperatingBlock(t, "<!-- actions: ops.ActionsMarkdown, checked by cmd/kfsdb/ops/actions_test.go -->\n", "<!-- end actions -->", ActionsMarkdown())
}

// requireOperatingBlock fails unless docs/OPERATING.md holds want
// between the markers begin and end, and prints want when it does not.
func requireOperatingBlock(t *testing.T, begin, end, want string) {
	t.Helper()
	doc, err := os.ReadFile("../../../docs/OPERATING.md")
	if err != nil {
		t.Fatal(err)
	}
	text := string(doc)
	i, j := strings.Index(text, begin), strings.Index(text, end)
	if i < 0 || j < i {
		t.Fatalf("docs/OPERATING.md has no %q … %q block", strings.TrimSpace(begin), end)
	}
	if got := text[i+len(begin) : j]; got != want {
		t.Errorf("docs/OPERATING.md's block %q is not the table's; write this between the markers:\n%s", strings.TrimSpace(begin), want)
	}
}
