package console

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"time"

	"github.com/knowledgefs/kfsdb/cmd/kfsdb/ops"
	"github.com/knowledgefs/kfsdb/kfstype"
)

// Bulk actions: from the attempts list's filter, GET /bulk is the dry
// run (ops.PlanBulk: the count, a sample, what the action would do), kept
// server-side by an id; its form POSTs /bulk with the id, the filter, the
// count and a token binding the three to the login, which runs the
// confirmed attempts in batches (ops.RunBulk) and redirects to GET
// /bulk/{id}, the result. A changed filter or count, another login's
// form, a second POST of the same form and an expired one are refused.

const (
	// bulkSample is how many matches a dry run shows.
	bulkSample = 20
	// maxBulkSkipsShown bounds the skipped attempts a result page lists.
	maxBulkSkipsShown = 100
)

// stateCount is a number of attempts in one run state.
type stateCount struct {
	State kfstype.RunState
	N     int
}

// stateCounts lists m in kfstype.RunStates() order, zeros left out.
func stateCounts(m map[kfstype.RunState]int) []stateCount {
	var out []stateCount
	for _, st := range kfstype.RunStates() {
		if m[st] > 0 {
			out = append(out, stateCount{st, m[st]})
		}
	}
	return out
}

// bulkPage is the dry run's data.
type bulkPage struct {
	Action    ops.Action
	To        kfstype.RunState
	Filter    string // ops.Filter.String()
	Back      string // the list of the same filter
	Max       int
	TooMany   bool
	Matched   int
	Changes   []stateCount // the targets by state read
	Changed   int
	Stay      int // matches the action leaves as they are
	Unchanged []stateCount
	Sample    []ops.SampleRow
	Batch     int
	// The confirmation form: the filter's fields, the dry run's id, the
	// count confirmed and the token binding them.
	Fields []field
	Plan   string
	Count  int
	CSRF   string
}

// bulkToken binds a bulk confirmation to the login, the tenant, the dry
// run, the action, the filter and the count of attempts it changes.
func (s *Server) bulkToken(p principal, f ops.Filter, plan string, action ops.Action, count string, now time.Time) string {
	return s.sign(now, "bulk", p.key, f.TenantID, plan, string(action), f.String(), count)
}

func (s *Server) bulkTokenValid(token string, p principal, f ops.Filter, plan string, action ops.Action, count string, now time.Time) bool {
	return s.signedValid(token, now, "bulk", p.key, f.TenantID, plan, string(action), f.String(), count)
}

// bulkDryRun reads every attempt the filter matches (at most BulkMax)
// and shows what the action would do, with the form that confirms it.
func (s *Server) bulkDryRun(w http.ResponseWriter, r *http.Request) {
	action, ok := s.actionToConfirm(w, r)
	if !ok {
		return
	}
	if !action.Spec().Bulk {
		s.fail(w, r, http.StatusBadRequest, notBulk(action))
		return
	}
	f, _, err := s.filterOf(r)
	if !s.filterStatus(w, r, err) {
		return
	}
	values := filterValues(f, s.tenantParam(f.TenantID))
	p := bulkPage{Action: action, To: action.Target(), Filter: f.String(), Back: "/attempts?" + values.Encode(),
		Max: s.cfg.BulkMax, Batch: s.cfg.BulkBatchSize, Fields: hiddenFields(values)}
	plan, err := ops.PlanBulk(r.Context(), s.repo, s.cfg.DB, action, f, s.cfg.BulkMax, bulkSample)
	var tooMany *ops.TooManyError
	switch {
	case errors.As(err, &tooMany):
		p.TooMany = true
		s.render(w, r, http.StatusOK, "bulk", fmt.Sprintf("Bulk %s: dry run", action), p)
		return
	case err != nil:
		s.serverError(w, r, err)
		return
	}
	p.Matched, p.Changes, p.Changed, p.Unchanged, p.Sample = plan.Matched, stateCounts(plan.ChangesByState()), len(plan.Targets),
		stateCounts(plan.Unchanged), plan.Sample
	p.Stay = p.Matched - p.Changed
	if p.Changed > 0 {
		who, _ := principalOf(r)
		now := time.Now()
		p.Plan, p.Count = s.bulk.put(who.key, f.TenantID, plan, now), len(plan.Targets)
		p.CSRF = s.bulkToken(who, f, p.Plan, action, strconv.Itoa(p.Count), now)
	}
	s.render(w, r, http.StatusOK, "bulk", fmt.Sprintf("Bulk %s: dry run", action), p)
}

// notBulk says that action is not offered on every match
// (ops.ActionSpec.Bulk).
func notBulk(action ops.Action) string {
	return fmt.Sprintf("%s is not offered on every match of a filter: want %s", action, ops.OrList(ops.BulkActions()))
}

// bulkOutcome is what a confirmed bulk action did, for its page.
type bulkOutcome struct {
	Confirmed, Applied, Skipped, NotReached, Batches int
	SkippedBy                                        []codeCount
	Skips                                            []ops.Result // the first maxBulkSkipsShown skipped
	Stopped                                          string       // why it stopped early; "" when it ran through
}

type codeCount struct {
	Code string
	N    int
}

// bulkRun executes a confirmed dry run: the form's filter, action and
// count must be those of the dry run it names, confirmed by the login
// that made it, once. Each attempt's result is audited per batch, then
// one line sums the action up; refusals are audited too.
func (s *Server) bulkRun(w http.ResponseWriter, r *http.Request) {
	now := time.Now()
	f, _, ferr := s.filterOf(r)
	planID, count, reason := r.PostFormValue("plan"), r.PostFormValue("count"), r.PostFormValue("reason")
	entry := auditEntry{Tenant: cmp.Or(f.TenantID, r.PostFormValue("tenant")), Action: "bulk-" + r.PostFormValue("action"),
		Result: ops.OutcomeRefused, OperatorReason: reason, Detail: "bulk " + planID}
	refuse := func(status int, why, msg string) {
		entry.Reason = why
		s.audit(r, entry)
		s.fail(w, r, status, msg)
	}
	action, err := ops.ParseAction(r.PostFormValue("action"))
	if err != nil {
		refuse(http.StatusBadRequest, "unknown action", err.Error())
		return
	}
	if !action.Spec().Bulk {
		refuse(http.StatusBadRequest, "not offered on every match", notBulk(action))
		return
	}
	var bad *badFilter
	switch {
	case errors.As(ferr, &bad):
		refuse(http.StatusBadRequest, "bad filter: "+bad.msg, bad.msg)
		return
	case ferr != nil:
		refuse(http.StatusNotFound, "no such tenant in this console", "no such tenant in this console")
		return
	}
	entry.Detail += "; filter " + f.String()
	who, _ := principalOf(r)
	if !s.bulkTokenValid(r.PostFormValue("csrf"), who, f, planID, action, count, now) {
		refuse(http.StatusForbidden, "missing, wrong or expired CSRF token, or a filter or count other than the dry run's",
			"missing, wrong or expired CSRF token, or the filter or count changed since the dry run: run the dry run again")
		return
	}
	e, why := s.bulk.take(planID, who.key, now)
	if e == nil {
		refuse(http.StatusConflict, why, why+": run the dry run again")
		return
	}
	// The token binds the form to the dry run's id; the dry run's own
	// filter, action and count must be the form's too.
	if e.tenant != f.TenantID || e.plan.Filter.String() != f.String() || e.plan.Action != action || strconv.Itoa(len(e.plan.Targets)) != count {
		s.bulk.finish(planID, &bulkOutcome{Stopped: "refused: the form does not match its dry run"}, now)
		refuse(http.StatusForbidden, "the form does not match its dry run", "the form does not match its dry run: run the dry run again")
		return
	}
	// The batches outlive the request's deadline, and a browser that
	// goes away: each attempt's change is audited as its batch ends.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(r.Context()), s.cfg.BulkTimeout)
	defer cancel()
	rep, runErr := ops.RunBulk(ctx, s.repo, s.cfg.DB, e.plan, ops.BulkRun{BatchSize: s.cfg.BulkBatchSize, Reason: reason,
		OnBatch: func(batch int, results []ops.Result) {
			for _, res := range results {
				if res.Outcome == ops.OutcomeNotReached {
					continue
				}
				s.audit(r, auditEntry{Tenant: f.TenantID, Attempt: res.AttemptID.String(), Action: string(action),
					From: string(res.From), To: string(res.To), Result: res.Outcome, Reason: res.Reason, OperatorReason: reason,
					Detail: fmt.Sprintf("bulk %s batch %d", planID, batch)})
			}
		}})
	out := outcomeOf(rep, len(e.plan.Targets), runErr)
	entry.Result, entry.Detail = ops.OutcomeApplied, "bulk "+planID+"; "+rep.Summary(e.plan)
	if runErr != nil {
		entry.Result, entry.Reason = ops.OutcomeFailed, out.Stopped
		if !errors.Is(runErr, context.DeadlineExceeded) {
			s.log.Error("console: bulk action stopped", "bulk", planID, "error", runErr)
		}
	}
	s.audit(r, entry)
	s.bulk.finish(planID, out, time.Now())
	http.Redirect(w, r, "/bulk/"+planID, http.StatusSeeOther)
}

// outcomeOf sums a run up for its page.
func outcomeOf(rep *ops.BulkReport, confirmed int, runErr error) *bulkOutcome {
	out := &bulkOutcome{Confirmed: confirmed, Applied: rep.Applied, Skipped: rep.Skipped, NotReached: rep.NotReached, Batches: rep.Batches}
	for code, n := range rep.SkippedBy {
		out.SkippedBy = append(out.SkippedBy, codeCount{code, n})
	}
	slices.SortFunc(out.SkippedBy, func(a, b codeCount) int { return cmp.Compare(a.Code, b.Code) })
	for _, res := range rep.Results {
		if res.Outcome == ops.OutcomeRefused && len(out.Skips) < maxBulkSkipsShown {
			out.Skips = append(out.Skips, res)
		}
	}
	switch {
	case errors.Is(runErr, context.DeadlineExceeded):
		out.Stopped = "the time limit of a bulk action was reached"
	case runErr != nil:
		out.Stopped = "a database error (see the console's log)"
	}
	return out
}

// bulkResultPage is a bulk action's result page.
type bulkResultPage struct {
	Action    ops.Action
	Filter    string
	Matched   int
	Unchanged []stateCount
	Outcome   *bulkOutcome
	Back      string
}

// bulkResult shows a bulk action's outcome to the login that ran it.
func (s *Server) bulkResult(w http.ResponseWriter, r *http.Request) {
	who, _ := principalOf(r)
	e := s.bulk.done(r.PathValue("id"), who.key, time.Now())
	if e == nil {
		s.fail(w, r, http.StatusNotFound, "no such bulk action (results are kept for 15 minutes, by the login that ran it)")
		return
	}
	p := bulkResultPage{Action: e.plan.Action, Filter: e.plan.Filter.String(), Matched: e.plan.Matched,
		Unchanged: stateCounts(e.plan.Unchanged), Outcome: e.outcome,
		Back: "/attempts?" + filterValues(e.plan.Filter, s.tenantParam(e.tenant)).Encode()}
	s.render(w, r, http.StatusOK, "bulkresult", fmt.Sprintf("Bulk %s: result", p.Action), p)
}
