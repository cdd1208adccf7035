package console

import (
	"cmp"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/knowledgefs/kfsdb/cmd/kfsdb/ops"
	"github.com/knowledgefs/kfsdb/repo"
)

// A tenant's limits of direct delivery (cap, rate, pause: repo's tenant
// limits): GET /tenant lists the limited tenants, GET /tenant?tenant=T
// shows one with the forms that change it (one per row of ops' table of
// tenant actions that applies to its limits), POST /tenant makes a change
// through ops.ChangeTenantLimits (what `kfsdb tenant` runs), in one
// transaction, only if the limits are still those the page showed. A
// confined console manages none: its database role may not read them
// (db/roles/console_roles.sql), and they are the platform's, not the
// tenant's.

// tenantPage is the tenant page's data.
type tenantPage struct {
	TenantID string
	// Limited lists every limited tenant, when no tenant is named.
	Limited []limitRow
	// Limits is the named tenant's; Summary its ops.LimitSummary, the
	// version its forms are bound to.
	Limits  limitRow
	Summary string
	// Forms are the changes offered on the limits shown, one per row of
	// ops' table of tenant actions that is (TenantActionSpec.Offered), in
	// the table's order; nil when read-only.
	Forms      []tenantForm
	Fields     []field // the tenant, for the forms of an unconfined console
	Unreadable string  // why the limits cannot be read
}

// tenantForm is one change the tenant page offers: its row of ops' table
// of tenant actions, and its CSRF token.
type tenantForm struct {
	Spec ops.TenantActionSpec
	CSRF string
}

// limitRow is one tenant's limits as the page shows them.
type limitRow struct {
	TenantID            string
	Cap                 int32
	Rate, Tokens        string // "" without a rate limit
	Burst               int32
	PausedAt            *time.Time
	PauseReason         string
	Paused, HasAnyLimit bool
}

func rowOf(l *repo.TenantLimit) limitRow {
	if l == nil {
		return limitRow{}
	}
	r := limitRow{TenantID: l.TenantID, Cap: l.MaxRunning, Burst: l.Burst, PausedAt: l.PausedAt, PauseReason: l.PauseReason,
		Paused: l.Paused(), HasAnyLimit: true}
	if l.Rate > 0 {
		r.Rate, r.Tokens = ops.FormatRate(l.Rate), strconv.FormatFloat(l.Tokens, 'f', 2, 64)
	}
	return r
}

// unreadable says why a read of the limits failed when the role may not
// read their table; "" for any other error.
func unreadable(err error) string {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == "42501" {
		return "this console's database role may not read the tenants' limits (document_compilation_tenant_limits): run db/roles/console_roles.sql again, which grants them to kfsdb_console_ro and kfsdb_operator"
	}
	return ""
}

// confinedNoLimits answers a confined console's request for the tenant
// page: its role reads no limits, and they are not the tenant's to set.
func (s *Server) confinedNoLimits(w http.ResponseWriter, r *http.Request) bool {
	if s.cfg.TenantID == "" {
		return false
	}
	s.fail(w, r, http.StatusForbidden, "a console confined to a tenant does not manage tenants' limits (its database role may not read them): use an unconfined console or kfsdb tenant")
	return true
}

// tenantToken binds a change form to the login, the tenant, the action
// and the limits the page showed.
func (s *Server) tenantToken(p principal, tenant, action, seen string, now time.Time) string {
	return s.sign(now, "tenant", p.key, tenant, action, seen)
}

// tenantForms are the changes the page offers on tenant's limits l (nil:
// none): a form per row of ops' table of tenant actions offered on them,
// its token bound to who and to seen, l's ops.LimitSummary.
func (s *Server) tenantForms(who principal, tenant string, l *repo.TenantLimit, seen string, now time.Time) []tenantForm {
	var out []tenantForm
	for _, spec := range ops.TenantActionSpecs() {
		if spec.IsOffered(l) {
			out = append(out, tenantForm{Spec: spec, CSRF: s.tenantToken(who, tenant, spec.Name, seen, now)})
		}
	}
	return out
}

func (s *Server) tenant(w http.ResponseWriter, r *http.Request) {
	if s.confinedNoLimits(w, r) {
		return
	}
	ctx := r.Context()
	tenant := r.URL.Query().Get("tenant")
	if tenant == "" {
		p := tenantPage{}
		all, err := s.repo.ListTenantLimits(ctx, s.cfg.DB, &repo.ListTenantLimitsParams{})
		if p.Unreadable = unreadable(err); err != nil && p.Unreadable == "" {
			s.serverError(w, r, err)
			return
		}
		for i := range all {
			p.Limited = append(p.Limited, rowOf(&all[i]))
		}
		s.render(w, r, http.StatusOK, "tenant", "Tenants' limits", p)
		return
	}
	p := tenantPage{TenantID: tenant, Fields: []field{{"tenant", tenant}}}
	l, err := ops.TenantLimits(ctx, s.repo, s.cfg.DB, tenant)
	if p.Unreadable = unreadable(err); p.Unreadable != "" {
		s.render(w, r, http.StatusOK, "tenant", "Tenant "+tenant, p)
		return
	}
	if err != nil {
		s.serverError(w, r, err)
		return
	}
	p.Limits, p.Summary = rowOf(l), ops.LimitSummary(l)
	if !s.cfg.ReadOnly {
		who, _ := principalOf(r)
		p.Forms = s.tenantForms(who, tenant, l, p.Summary, time.Now())
	}
	s.render(w, r, http.StatusOK, "tenant", "Tenant "+tenant, p)
}

// tenantChange applies a confirmed change of a tenant's limits, audits it
// (applied, refused or failed) and redirects to the tenant's page with
// the outcome as a flash.
func (s *Server) tenantChange(w http.ResponseWriter, r *http.Request) {
	f := r.PostForm
	tenant, action, seen := f.Get("tenant"), f.Get("action"), f.Get("seen")
	entry := auditEntry{Tenant: cmp.Or(tenant, s.cfg.TenantID), Action: action, Result: ops.OutcomeRefused, OperatorReason: f.Get("reason")}
	refuse := func(status int, why, msg string) {
		entry.Reason = why
		s.audit(r, entry)
		s.fail(w, r, status, msg)
	}
	if s.cfg.TenantID != "" {
		refuse(http.StatusForbidden, "a confined console does not manage tenants' limits", "a console confined to a tenant does not manage tenants' limits")
		return
	}
	spec, known := ops.LookupTenantAction(action)
	if !known {
		refuse(http.StatusBadRequest, "unknown action", fmt.Sprintf("unknown action %q", action))
		return
	}
	who, _ := principalOf(r)
	if tenant == "" || !s.signedValid(f.Get("csrf"), time.Now(), "tenant", who.key, tenant, action, seen) {
		refuse(http.StatusForbidden, "missing, wrong or expired CSRF token", "missing, wrong or expired CSRF token: open the tenant's page again")
		return
	}
	change := ops.TenantChange{Action: action, Seen: seen, Reason: entry.OperatorReason}
	if spec.TakesLifts {
		change.ClearCap, change.ClearRate = f.Get("clear") == "cap", f.Get("clear") == "rate"
	}
	var bad string
	if v := f.Get("max_running"); v != "" && spec.TakesLimits {
		n, err := strconv.ParseInt(v, 10, 32)
		change.MaxRunning, bad = int32(n), cmp.Or(errText(err, "max running is not a whole number"), bad)
	}
	if v := f.Get("rate"); v != "" && spec.TakesLimits {
		x, err := strconv.ParseFloat(v, 64)
		change.Rate, bad = x, cmp.Or(errText(err, "rate is not a number of leases per second"), bad)
	}
	if v := f.Get("burst"); v != "" && spec.TakesLimits {
		n, err := strconv.ParseInt(v, 10, 32)
		change.Burst, bad = int32(n), cmp.Or(errText(err, "burst is not a whole number"), bad)
	}
	if change.Burst != 0 && change.Rate == 0 {
		bad = cmp.Or(bad, "a burst goes with a rate")
	}
	if bad != "" {
		refuse(http.StatusBadRequest, bad, bad)
		return
	}
	var res *ops.TenantChangeResult
	err := ops.InTx(r.Context(), s.cfg.DB, func(db repo.DBTX) error {
		var err error
		res, err = ops.ChangeTenantLimits(r.Context(), s.repo, db, tenant, change)
		return err
	})
	if res != nil {
		entry.From, entry.To = ops.LimitSummary(res.Before), ops.LimitSummary(res.Before)
	}
	var refused *ops.TenantChangeRefused
	flash := action + "-applied"
	switch {
	case errors.As(err, &refused):
		entry.Reason, flash = refused.Why, action+"-refused"
		if refused.Stale {
			flash = action + "-changed"
		}
	case err != nil:
		entry.Result, entry.Reason = ops.OutcomeFailed, err.Error()
		var input *repo.InputError
		if errors.As(err, &input) {
			entry.Result = ops.OutcomeRefused
		}
		s.audit(r, entry)
		s.serverError(w, r, err)
		return
	default:
		entry.Result, entry.To = ops.OutcomeApplied, ops.LimitSummary(res.After)
	}
	s.audit(r, entry)
	http.Redirect(w, r, "/tenant?"+url.Values{"tenant": {tenant}, "flash": {flash}}.Encode(), http.StatusSeeOther)
}

// errText is msg when err is set, else "".
func errText(err error, msg string) string {
	if err != nil {
		return msg
	}
	return ""
}
