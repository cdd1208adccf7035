package console

import (
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"

	"github.com/google/uuid"

	"github.com/knowledgefs/kfsdb/cmd/kfsdb/ops"
	"github.com/knowledgefs/kfsdb/kfstype"
	"github.com/knowledgefs/kfsdb/repo"
)

// attemptPage is the attempt page's data.
type attemptPage struct {
	View    *ops.AttemptView
	Actions []ops.Action // those ops.Check allows; none when read-only
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
	a, o, err = s.repo.GetAttemptWithOutbox(r.Context(), s.cfg.DB, tenant, id)
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
			if allowed, _ := act.Check(a); allowed {
				p.Actions = append(p.Actions, act)
			}
		}
	}
	s.render(w, r, http.StatusOK, "attempt", "Attempt "+a.ID.String(), p)
}

// confirm shows what an action would do (ops.Plan) at the row version
// read now, with the form that applies it at that version.
func (s *Server) confirm(w http.ResponseWriter, r *http.Request) {
	if s.cfg.ReadOnly {
		s.fail(w, r, http.StatusForbidden, "this console is read-only")
		return
	}
	action, err := ops.ParseAction(r.URL.Query().Get("action"))
	if err != nil {
		s.fail(w, r, http.StatusBadRequest, err.Error())
		return
	}
	a, o, tenant, ok := s.load(w, r)
	if !ok {
		return
	}
	p := confirmPage{View: ops.ViewOf(a, o), Plan: ops.Plan(action, a), Tenant: s.tenantParam(tenant),
		CSRF: s.csrfToken(tenant, a.ID.String(), string(action))}
	s.render(w, r, http.StatusOK, "confirm", fmt.Sprintf("Confirm %s", action), p)
}

// act applies the confirmed action through ops.Do at the row version the
// operator confirmed: if the attempt changed since, it is refused. It
// redirects to the attempt page with the outcome as a flash.
func (s *Server) act(w http.ResponseWriter, r *http.Request) {
	action, err := ops.ParseAction(r.PostFormValue("action"))
	if err != nil {
		s.fail(w, r, http.StatusBadRequest, err.Error())
		return
	}
	seen, err := strconv.ParseInt(r.PostFormValue("version"), 10, 32)
	if err != nil {
		s.fail(w, r, http.StatusBadRequest, "version is not a row version")
		return
	}
	tenant, err := s.tenantOf(r)
	if err != nil || !s.csrfValid(r.PostFormValue("csrf"), tenant, r.PathValue("id"), string(action)) {
		s.fail(w, r, http.StatusForbidden, "missing or wrong CSRF token: open the attempt page and confirm again")
		return
	}
	a, _, tenant, ok := s.load(w, r)
	if !ok {
		return
	}
	var res ops.Result
	if a.RowVersion != int32(seen) {
		res = ops.Result{AttemptID: a.ID, Action: action, From: a.RunState, To: a.RunState, Outcome: ops.OutcomeRefused,
			Reason: fmt.Sprintf("the attempt changed since you confirmed (row version %d, now %d); look again", seen, a.RowVersion)}
	} else if res, err = ops.Do(r.Context(), s.repo, s.cfg.DB, action, a, r.PostFormValue("reason")); err != nil {
		s.serverError(w, r, err)
		return
	}
	flash := fmt.Sprintf("%s %s: %s → %s", action, res.Outcome, res.From, res.To)
	if res.Reason != "" {
		flash += " (" + res.Reason + ")"
	}
	q := url.Values{"flash": {flash}}
	if t := s.tenantParam(tenant); t != "" {
		q.Set("tenant", t)
	}
	http.Redirect(w, r, "/attempts/"+a.ID.String()+"?"+q.Encode(), http.StatusSeeOther)
}
