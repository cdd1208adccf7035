package console

import (
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/knowledgefs/kfsdb/cmd/kfsdb/ops"
	"github.com/knowledgefs/kfsdb/kfstype"
)

// TestBulkPagesRender renders the dry run and the result page from
// made-up data (the database tests render them from real runs): every
// template path executes, and what a person must read is there.
// Mutation: a template field renamed in Go but not in the page fails it.
func TestBulkPagesRender(t *testing.T) {
	s := pageServer(t)
	a := &kfstype.Attempt{ID: uuid.New(), TenantID: "acme", RunState: kfstype.RunStateQueued, CreatedAt: time.Now()}
	set, _ := ops.LookupTenantAction(ops.TenantSetLimit)
	lift, _ := ops.LookupTenantAction(ops.TenantClearLimit)
	resume, _ := ops.LookupTenantAction(ops.TenantResume)
	done := &kfstype.Attempt{ID: uuid.New(), TenantID: "acme", RunState: kfstype.RunStateSucceeded, CreatedAt: time.Now(), CompletedAt: new(time.Now())}
	for name, tc := range map[string]struct {
		page string
		data any
		want []string
	}{
		"DryRun": {"bulk", bulkPage{Action: ops.Cancel, To: kfstype.RunStateCanceled, Filter: `tenant="acme" state=any`, Matched: 2,
			Changes: []stateCount{{kfstype.RunStateQueued, 1}}, Changed: 1, Stay: 1, Unchanged: []stateCount{{kfstype.RunStateSucceeded, 1}},
			Sample: []ops.SampleRow{{View: ops.ViewOf(a, nil), Plan: ops.Plan(ops.Cancel, a)}, {View: ops.ViewOf(done, nil), Plan: ops.Plan(ops.Cancel, done)}},
			Batch:  100, Fields: []field{{"tenant", "acme"}}, Plan: "p1", Count: 1, CSRF: "x.y"},
			[]string{`id="matched">2<`, `id="would-change">1<`, `id="would-stay">1<`, `name="plan" value="p1"`, `Yes, cancel 1 attempts`, "→ canceled", "stay: "}},
		"TooMany": {"bulk", bulkPage{Action: ops.Retry, TooMany: true, Max: 12345}, []string{`id="too-many"`, "at most 12,345."}},
		"None":    {"bulk", bulkPage{Action: ops.Retry}, []string{`id="none"`}},
		"Result": {"bulkresult", bulkResultPage{Action: ops.Supersede, Filter: "f", Matched: 3, Unchanged: []stateCount{{kfstype.RunStateFailed, 1}},
			Outcome: &bulkOutcome{Confirmed: 2, Applied: 1, Skipped: 1, Batches: 1, SkippedBy: []codeCount{{ops.RefusedStale, 1}},
				Skips: []ops.Result{{AttemptID: a.ID, From: kfstype.RunStateQueued, Code: ops.RefusedStale, Reason: "changed"}}}},
			[]string{`id="applied">1<`, `id="skipped">1<`, `id="confirmed">2<`, ops.RefusedStale, "1 failed matched but were left"}},
		"TenantList": {"tenant", tenantPage{Limited: []limitRow{{TenantID: "acme", Cap: 3}, {TenantID: "globex", Rate: "2.5", Burst: 3, Tokens: "1.00"}}},
			[]string{`href="/tenant?tenant=acme"`, "2.5", `name="tenant" required`}},
		"TenantPausedWithForms": {"tenant", tenantPage{TenantID: "acme", Summary: "cap 3, paused since x",
			Limits: limitRow{TenantID: "acme", Cap: 3, Paused: true, PausedAt: new(time.Now()), PauseReason: "incident 42"},
			Forms:  []tenantForm{{Spec: resume, CSRF: "r.1"}, {Spec: set, CSRF: "s.1"}, {Spec: lift, CSRF: "c.1"}}},
			[]string{"incident 42", `id="resume"`, `value="r.1"`, `value="s.1"`, `id="clear-cap"`, `name="seen" value="cap 3, paused since x"`}},
		"TenantReadOnly":   {"tenant", tenantPage{TenantID: "acme", Summary: "none"}, []string{`id="cap">none<`, `id="summary">none<`}},
		"TenantUnreadable": {"tenant", tenantPage{TenantID: "acme", Unreadable: "may not read"}, []string{`id="unreadable"`}},
		"Stopped": {"bulkresult", bulkResultPage{Action: ops.Cancel, Outcome: &bulkOutcome{Confirmed: 5, NotReached: 5, Stopped: "the time limit"}},
			[]string{`id="stopped"`, `id="not-reached">5<`}},
	} {
		t.Run(name, func(t *testing.T) { requirePage(t, s, tc.page, tc.data, tc.want, nil) })
	}
}
