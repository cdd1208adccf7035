package console

import (
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/knowledgefs/kfsdb/cmd/kfsdb/ops"
	"github.com/knowledgefs/kfsdb/kfstype"
)

// TestActionPagesRender renders the attempt page, the confirmation pages
// and the list's bulk buttons from ops' table of actions with made-up
// data (the database tests render them from real attempts): each row's
// label, effect and reason words reach the page, and an action not
// offered on every match gets no bulk button. Mutation: the reason label
// ignoring ActionSpec.StoresReason fails RetryConfirm or CancelConfirm;
// the list offering ops.Actions() fails the release check.
func TestActionPagesRender(t *testing.T) {
	s := pageServer(t)
	pending := &kfstype.Attempt{ID: uuid.New(), TenantID: "acme", RunState: kfstype.RunStateDispatchPending, RowVersion: 3, CreatedAt: time.Now()}
	failed := &kfstype.Attempt{ID: uuid.New(), TenantID: "acme", RunState: kfstype.RunStateFailed, RowVersion: 4, CreatedAt: time.Now()}
	deferred := &kfstype.OutboxMessage{ID: uuid.New(), Status: kfstype.OutboxStatusPending, AvailableAt: kfstype.Forever}
	confirmOf := func(a ops.Action, att *kfstype.Attempt, o *kfstype.OutboxMessage) confirmPage {
		return confirmPage{View: ops.ViewOf(att, o), Plan: ops.PlanRow(a, att, o), CSRF: "c.1"}
	}
	for name, tc := range map[string]struct {
		page     string
		data     any
		want     []string
		dontWant []string
	}{
		"Attempt": {"attempt", attemptPage{View: ops.ViewOf(pending, deferred), Actions: []ops.Action{ops.Cancel, ops.Supersede, ops.Release}},
			[]string{`<input type="hidden" name="action" value="cancel"><button type="submit" class="cancel">cancel…</button>`,
				`<button type="submit" class="release">release…</button>`}, nil},
		"CancelConfirm": {"confirm", confirmOf(ops.Cancel, pending, nil),
			[]string{`; cancel moves it to <b>canceled</b>. If anyone`, `<label>Reason (stored with the attempt and recorded in the audit log)`,
				`id="confirm">Yes, cancel</button>`}, nil},
		"RetryConfirm": {"confirm", confirmOf(ops.Retry, failed, nil),
			[]string{`retry moves it to <b>dispatch_pending</b>.`, `<label>Reason (recorded in the audit log) <input name="reason"`}, nil},
		"ReleaseConfirm": {"confirm", confirmOf(ops.Release, pending, deferred),
			[]string{`; release makes its deferred outbox row due now: the relay or a worker&#39;s fetch takes it. If anyone`,
				`<label>Reason (recorded in the audit log)`, `id="confirm">Yes, release</button>`}, nil},
		"ReleaseOfADueRow": {"confirm", confirmOf(ops.Release, pending, &kfstype.OutboxMessage{Status: kfstype.OutboxStatusPending, AvailableAt: time.Now()}),
			[]string{`<p class="error">Not possible: its outbox row is not deferred`}, []string{`id="confirm"`}},
		"BulkButtons": {"attempts", attemptsPage{TenantID: "acme", Bulk: ops.BulkActions(), BulkFields: []field{{"tenant", "acme"}}, BulkMax: 10000},
			[]string{`<input type="hidden" name="action" value="cancel"><button type="submit" class="cancel" id="bulk-cancel">cancel every match…</button>`,
				`id="bulk-retry">retry every match…</button>`, `id="bulk-supersede">supersede every match…</button>`}, []string{"bulk-release"}},
		"BulkRetryReason": {"bulk", bulkPage{Action: ops.Retry, Matched: 1, Changed: 1, Changes: []stateCount{{kfstype.RunStateFailed, 1}}, Count: 1, Plan: "p", CSRF: "x"},
			[]string{`<label>Reason (recorded in the audit log) <input name="reason"`}, nil},
		"BulkCancelReason": {"bulk", bulkPage{Action: ops.Cancel, Matched: 1, Changed: 1, Changes: []stateCount{{kfstype.RunStateQueued, 1}}, Count: 1, Plan: "p", CSRF: "x"},
			[]string{`<label>Reason (stored with each attempt and recorded in the audit log) <input name="reason"`}, nil},
	} {
		t.Run(name, func(t *testing.T) { requirePage(t, s, tc.page, tc.data, tc.want, tc.dontWant) })
	}
}

// pageServer is a Server that renders pages and nothing else.
func pageServer(t *testing.T) *Server {
	t.Helper()
	pages, err := parsePages()
	if err != nil {
		t.Fatal(err)
	}
	s := &Server{pages: pages}
	s.log = testLogger(t)
	return s
}

// requirePage renders page from data and requires every want in it and
// no dontWant.
func requirePage(t *testing.T, s *Server, page string, data any, want, dontWant []string) {
	t.Helper()
	w := httptest.NewRecorder()
	s.render(w, httptest.NewRequest("GET", "/", nil), 200, page, "t", data)
	for _, w1 := range want {
		if !strings.Contains(w.Body.String(), w1) {
			t.Errorf("no %q in:\n%s", w1, w.Body.String())
		}
	}
	for _, not := range dontWant {
		if strings.Contains(w.Body.String(), not) {
			t.Errorf("%q in:\n%s", not, w.Body.String())
		}
	}
}
