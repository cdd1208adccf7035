package console

import (
	"cmp"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/google/uuid"

	"github.com/knowledgefs/kfsdb/cmd/kfsdb/ops"
	"github.com/knowledgefs/kfsdb/kfstype"
	"github.com/knowledgefs/kfsdb/repo"
)

// attemptPage is the attempt page's data.
type attemptPage struct {
	View    *ops.AttemptView
	Actions []ops.Action // those ops.Action.CheckRow allows; none when read-only
	Tenant  string       // the ?tenant= of links and forms ("" when confined)
}

// confirmPage is the confirmation page's data.
type confirmPage struct {
	View   *ops.AttemptView
	Plan   ops.Result
	Tenant string
	CSRF   string
}

// load reads the request's attempt ({id}, in tenantOf's tenant) and its
// outbox row, answering 404 itself for a bad id, an unknown attempt or
// another tenant's; ok is false when it answered.
func (s *Server) load(w http.ResponseWriter, r *http.Request) (a *kfstype.Attempt, o *kfstype.OutboxMessage, tenant string, ok bool) {
	id, err := uuid.Parse(r.PathValue("id"))
	if err != nil {
		s.fail(w, r, http.StatusNotFound, "no such attempt")
		return nil, nil, "", false
	}
	tenant, err = s.tenantOf(r)
	if err != nil {
		s.fail(w, r, http.StatusNotFound, "no such attempt (name its tenant with ?tenant=)")
		return nil, nil, "", false
	}
	a, o, err = s.repo.GetAttemptWithOutbox(r.Context(), s.cfg.DB, &repo.GetAttemptWithOutboxParams{TenantID: tenant, AttemptID: id})
	switch {
	case errors.Is(err, repo.ErrNotFound):
		s.fail(w, r, http.StatusNotFound, "no such attempt")
		return nil, nil, "", false
	case err != nil:
		s.serverError(w, r, err)
		return nil, nil, "", false
	}
	return a, o, tenant, true
}

// tenantParam is the ?tenant= an unconfined console's links carry.
func (s *Server) tenantParam(tenant string) string {
	if s.cfg.TenantID != "" {
		return ""
	}
	return tenant
}

func (s *Server) attempt(w http.ResponseWriter, r *http.Request) {
	a, o, tenant, ok := s.load(w, r)
	if !ok {
		return
	}
	p := attemptPage{View: ops.ViewOf(a, o), Tenant: s.tenantParam(tenant)}
	p.View.Timeline = ops.Timeline(a, o)
	if !s.cfg.ReadOnly {
		for _, act := range ops.Actions() {
			if allowed, _ := act.CheckRow(a, o); allowed {
				p.Actions = append(p.Actions, act)
			}
		}
	}
	s.render(w, r, http.StatusOK, "attempt", "Attempt "+a.ID.String(), p)
}

// actionToConfirm is the ?action= a confirmation page (one attempt's,
// or a bulk dry run's) is for, answering itself (ok false) when the
// console is read-only (403) or the action unknown (400).
func (s *Server) actionToConfirm(w http.ResponseWriter, r *http.Request) (ops.Action, bool) {
	if s.cfg.ReadOnly {
		s.fail(w, r, http.StatusForbidden, "this console is read-only")
		return "", false
	}
	action, err := ops.ParseAction(r.URL.Query().Get("action"))
	if err != nil {
		s.fail(w, r, http.StatusBadRequest, err.Error())
		return "", false
	}
	return action, true
}

// confirm shows what an action would do (ops.PlanRow, which reads the
// outbox row too) at the row version read now, with the form that
// applies it at that version.
func (s *Server) confirm(w http.ResponseWriter, r *http.Request) {
	action, ok := s.actionToConfirm(w, r)
	if !ok {
		return
	}
	a, o, tenant, ok := s.load(w, r)
	if !ok {
		return
	}
	who, _ := principalOf(r)
	p := confirmPage{View: ops.ViewOf(a, o), Plan: ops.PlanRow(action, a, o), Tenant: s.tenantParam(tenant),
		CSRF: s.csrfToken(who, tenant, a.ID.String(), string(action), a.RowVersion, time.Now())}
	s.render(w, r, http.StatusOK, "confirm", fmt.Sprintf("Confirm %s", action), p)
}

// act applies the confirmed action through ops.Do at the row version the
// operator confirmed: if the attempt changed since, it is refused. It
// writes an audit line either way and redirects to the attempt page with
// the outcome as a flash.
func (s *Server) act(w http.ResponseWriter, r *http.Request) {
	// The tenant the request concerned: the console's when confined,
	// else the one the form names, refusals included.
	tenant, tenantErr := s.tenantOf(r)
	entry := auditEntry{Tenant: cmp.Or(tenant, r.PostFormValue("tenant")), Attempt: r.PathValue("id"), Action: r.PostFormValue("action"),
		Result: ops.OutcomeRefused, OperatorReason: r.PostFormValue("reason")}
	refuse := func(status int, why, msg string) {
		entry.Reason = why
		s.audit(r, entry)
		s.fail(w, r, status, msg)
	}
	action, err := ops.ParseAction(entry.Action)
	if err != nil {
		refuse(http.StatusBadRequest, "unknown action", err.Error())
		return
	}
	seen, err := strconv.ParseInt(r.PostFormValue("version"), 10, 32)
	if err != nil {
		refuse(http.StatusBadRequest, "bad row version", "version is not a row version")
		return
	}
	who, _ := principalOf(r)
	if tenantErr != nil || !s.csrfValid(r.PostFormValue("csrf"), who, tenant, entry.Attempt, string(action), int32(seen), time.Now()) {
		refuse(http.StatusForbidden, "missing, wrong or expired CSRF token",
			"missing, wrong or expired CSRF token: open the attempt page and confirm again")
		return
	}
	a, _, tenant, ok := s.load(w, r)
	if !ok {
		entry.Reason = "not found or not readable"
		s.audit(r, entry)
		return
	}
	var res ops.Result
	flash := string(action) + "-refused"
	if a.RowVersion != int32(seen) {
		res = ops.Result{AttemptID: a.ID, Action: action, From: a.RunState, To: a.RunState, Outcome: ops.OutcomeRefused,
			Reason: fmt.Sprintf("the attempt changed since it was confirmed (row version %d, now %d)", seen, a.RowVersion)}
		flash = string(action) + "-changed"
	} else if res, err = ops.Do(r.Context(), s.repo, s.cfg.DB, action, a, entry.OperatorReason); err != nil {
		entry.From, entry.Reason = string(a.RunState), "database error"
		s.audit(r, entry)
		s.serverError(w, r, err)
		return
	} else if res.Outcome == ops.OutcomeApplied {
		flash = string(action) + "-applied"
	}
	entry.From, entry.To, entry.Result, entry.Reason = string(res.From), string(res.To), res.Outcome, res.Reason
	s.audit(r, entry)
	q := url.Values{"flash": {flash}}
	if t := s.tenantParam(tenant); t != "" {
		q.Set("tenant", t)
	}
	http.Redirect(w, r, "/attempts/"+a.ID.String()+"?"+q.Encode(), http.StatusSeeOther)
}
