package console

import (
	"context"
	"errors"
	"fmt"
	"html/template"
	"net/http"
	"strconv"
	"time"

	"github.com/knowledgefs/kfsdb/cmd/kfsdb/ops"
	"github.com/knowledgefs/kfsdb/kfstype"
	"github.com/knowledgefs/kfsdb/repo"
)

// layout is what every page's template gets.
type layout struct {
	Title    string
	Tenant   string // the confined tenant, "" for every tenant or without a login
	ReadOnly bool
	LoggedIn bool // the request has a session: show Log out and the scope
	Flash    string
	Page     any
}

var funcs = template.FuncMap{
	"count": func(n int64, atLeast bool) string {
		if atLeast {
			return fmt.Sprintf("≥ %d", n)
		}
		return fmt.Sprint(n)
	},
	"time": func(t any) string {
		switch v := t.(type) {
		case time.Time:
			return v.UTC().Format("2006-01-02 15:04:05.000 MST")
		case *time.Time:
			if v != nil {
				return v.UTC().Format("2006-01-02 15:04:05.000 MST")
			}
		}
		return "–"
	},
	"str": func(s *string) string {
		if s == nil {
			return "–"
		}
		return *s
	},
	"age": func(d time.Duration) string { return d.Round(time.Second).String() },
	// num writes a count with thousands separators: 10,000.
	"num": func(n int) string {
		s := strconv.Itoa(n)
		for i := len(s) - 3; i > 0 && s[i-1] != '-'; i -= 3 {
			s = s[:i] + "," + s[i:]
		}
		return s
	},
	"live": func(s kfstype.RunState) bool { return s.Live() },
}

// render writes a page; a template error after the header is only logged.
func (s *Server) render(w http.ResponseWriter, r *http.Request, status int, name, title string, page any) {
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(status)
	_, loggedIn := principalOf(r)
	data := layout{Title: title, ReadOnly: s.cfg.ReadOnly, LoggedIn: loggedIn,
		Flash: flashes[r.URL.Query().Get("flash")], Page: page}
	if loggedIn {
		// Which tenant a console serves is for those logged in: a login
		// page or an error page names none.
		data.Tenant = s.cfg.TenantID
	}
	if err := s.pages[name].ExecuteTemplate(w, "layout", data); err != nil {
		s.log.Error("console: render page", "page", name, "error", err)
	}
}

// fail renders the error page; server errors are logged, not shown.
func (s *Server) fail(w http.ResponseWriter, r *http.Request, status int, msg string) {
	s.render(w, r, status, "error", http.StatusText(status), map[string]any{"Status": status, "Message": msg})
}

// serverError answers a failed repo call: bad input (an *InputError: a
// tenant too long or not UTF-8, the zero UUID) is the client's, 400 with
// the reason and no ERROR line; anything else is logged and 500.
func (s *Server) serverError(w http.ResponseWriter, r *http.Request, err error) {
	var bad *repo.InputError
	if errors.As(err, &bad) {
		s.fail(w, r, http.StatusBadRequest, bad.Error())
		return
	}
	if errors.Is(err, context.DeadlineExceeded) && r.Context().Err() != nil {
		s.log.Warn("console: request timed out", "path", r.URL.Path, "timeout", s.cfg.QueryTimeout)
		s.fail(w, r, http.StatusServiceUnavailable, "the database took too long; try again")
		return
	}
	s.log.Error("console: request failed", "path", r.URL.Path, "error", err)
	s.fail(w, r, http.StatusInternalServerError, "the database read or write failed; see the console's log")
}

// flashes are the only messages ?flash= shows: an action's outcome, by
// key, so that no link can put words of its own on a page.
var flashes = func() map[string]string {
	m := map[string]string{}
	for _, a := range ops.Actions() {
		m[string(a)+"-applied"] = fmt.Sprintf("%s applied", a)
		m[string(a)+"-changed"] = fmt.Sprintf("%s refused: the attempt changed since you confirmed; look again", a)
		m[string(a)+"-refused"] = fmt.Sprintf("%s refused: not allowed in the attempt's state now; look again", a)
	}
	for _, a := range ops.TenantActions() {
		m[a+"-applied"] = fmt.Sprintf("%s applied", a)
		m[a+"-changed"] = fmt.Sprintf("%s refused: the tenant's limits changed since you looked; look again", a)
		m[a+"-refused"] = fmt.Sprintf("%s refused: it does not apply to the tenant's limits now; look again", a)
	}
	return m
}()

// errNoTenant is returned by tenantOf when an unconfined console's request
// names no tenant.
var errNoTenant = errors.New("no tenant")

// tenantOf is the tenant a request works on: the confined tenant (a
// request naming another is not found), else its ?tenant=.
func (s *Server) tenantOf(r *http.Request) (string, error) {
	asked := r.FormValue("tenant")
	switch {
	case s.cfg.TenantID != "" && asked != "" && asked != s.cfg.TenantID:
		return "", repo.ErrNotFound
	case s.cfg.TenantID != "":
		return s.cfg.TenantID, nil
	case asked == "":
		return "", errNoTenant
	}
	return asked, nil
}

// overviewPage is the overview's data.
type overviewPage struct {
	Cap        int32
	States     []repo.StateCount
	Backlog    *repo.Backlog // nil when confined: the outbox has no tenant
	Throughput []repo.MinuteCount
	MaxPerMin  int64
	Ended      int64
	EndedCap   bool // the read stopped at the cap: every count is a lower bound
	Stuck      []stuckCount
	StuckAny   []*repo.StuckAttempt // the longest stuck, at most 10
	StuckCap   bool
}

type stuckCount struct {
	Reason      repo.StuckReason
	Description string
	N           int
}

func (s *Server) overview(w http.ResponseWriter, r *http.Request) {
	ctx, tenant, all := r.Context(), s.cfg.TenantID, s.cfg.TenantID == ""
	p := overviewPage{Cap: repo.CountCapDefault}
	var err error
	if p.States, err = s.repo.CountAttempts(ctx, s.cfg.DB, &repo.CountAttemptsParams{TenantID: tenant, AllTenants: all}); err != nil {
		s.serverError(w, r, err)
		return
	}
	if all {
		if p.Backlog, err = s.repo.OutboxBacklog(ctx, s.cfg.DB, &repo.OutboxBacklogParams{}); err != nil {
			s.serverError(w, r, err)
			return
		}
	}
	if p.Throughput, err = s.repo.Throughput(ctx, s.cfg.DB, &repo.ThroughputParams{TenantID: tenant, AllTenants: all, Cap: s.cfg.ThroughputCap}); err != nil {
		s.serverError(w, r, err)
		return
	}
	p.MaxPerMin = 1
	for _, m := range p.Throughput {
		p.MaxPerMin, p.Ended, p.EndedCap = max(p.MaxPerMin, m.Total()), p.Ended+m.Total(), m.AtLeast
	}
	stuck, err := s.repo.ListStuck(ctx, s.cfg.DB, &repo.ListStuckParams{TenantID: tenant, AllTenants: all, Limit: repo.MaxListLimit})
	if err != nil {
		s.serverError(w, r, err)
		return
	}
	p.StuckCap = len(stuck) == repo.MaxListLimit
	n := map[repo.StuckReason]int{}
	for _, a := range stuck {
		n[a.Reason]++
	}
	for _, reason := range repo.StuckReasons() {
		p.Stuck = append(p.Stuck, stuckCount{Reason: reason, Description: reason.Description(), N: n[reason]})
	}
	p.StuckAny = stuck[:min(len(stuck), 10)]
	s.render(w, r, http.StatusOK, "overview", "Overview", p)
}

// attemptsPage is the attempts list's data.
type attemptsPage struct {
	TenantID string
	Confined bool // the console serves TenantID only: no tenant field
	Filter   filterForm
	Attempts []*ops.AttemptView
	Next     string // the next page's URL, "" on the last page
	Error    string
	// Bulk are the actions offered on every match (ops.BulkActions; none
	// when read-only or without a tenant), BulkFields the filter they carry
	// and BulkMax how many attempts one may act on.
	Bulk       []ops.Action
	BulkFields []field
	BulkMax    int
}

func (s *Server) attempts(w http.ResponseWriter, r *http.Request) {
	f, form, err := s.filterOf(r)
	p := attemptsPage{Filter: form, Confined: s.cfg.TenantID != ""}
	if errors.Is(err, errNoTenant) {
		p.Error = "Name a tenant to list its attempts."
		s.render(w, r, http.StatusOK, "attempts", "Attempts", p)
		return
	}
	if !s.filterStatus(w, r, err) {
		return
	}
	p.TenantID = f.TenantID
	after, err := ops.DecodeCursor(r.URL.Query().Get("after"))
	if err != nil {
		s.fail(w, r, http.StatusBadRequest, "bad page token")
		return
	}
	page, err := s.repo.ListAttempts(r.Context(), s.cfg.DB, f.Params(after, s.cfg.PageSize))
	if err != nil {
		s.serverError(w, r, err)
		return
	}
	for _, a := range page.Attempts {
		p.Attempts = append(p.Attempts, ops.ViewOf(a, nil))
	}
	if page.Next != nil {
		next := filterValues(f, s.tenantParam(f.TenantID))
		next.Set("after", ops.EncodeCursor(page.Next))
		p.Next = "/attempts?" + next.Encode()
	}
	if !s.cfg.ReadOnly {
		p.Bulk, p.BulkFields, p.BulkMax = ops.BulkActions(), hiddenFields(filterValues(f, s.tenantParam(f.TenantID))), s.cfg.BulkMax
	}
	s.render(w, r, http.StatusOK, "attempts", "Attempts", p)
}
