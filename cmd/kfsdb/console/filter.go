package console

import (
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/knowledgefs/kfsdb/cmd/kfsdb/ops"
	"github.com/knowledgefs/kfsdb/kfstype"
)

// filterForm is an attempts filter as the request wrote it, to show it
// again in the filter form.
type filterForm struct {
	States                     []stateBox
	Space, Older, Newer, Error string
}

type stateBox struct {
	State   kfstype.RunState
	Checked bool
}

// badFilter is a filter value the console cannot read: 400, with its
// message.
type badFilter struct{ msg string }

func (e *badFilter) Error() string { return e.msg }

// filterOf reads the request's attempts filter: the tenant (tenantOf),
// state (repeated; none is every state), space, older and newer (ages:
// 30m, 2h, 7d) and error (a last error code), from the URL's query or a
// POST's form. form is what the request wrote, for the filter form, even
// when err is set.
//
// Errors: repo.ErrNotFound (a tenant other than the confined one),
// errNoTenant, *badFilter.
func (s *Server) filterOf(r *http.Request) (f ops.Filter, form filterForm, err error) {
	_ = r.ParseForm() // a GET's query; a POST's body was read by secure
	v := r.Form
	form = filterForm{Space: strings.TrimSpace(v.Get("space")), Older: strings.TrimSpace(v.Get("older")),
		Newer: strings.TrimSpace(v.Get("newer")), Error: strings.TrimSpace(v.Get("error"))}
	asked := map[kfstype.RunState]bool{}
	for _, st := range v["state"] {
		asked[kfstype.RunState(st)] = true
	}
	for _, st := range kfstype.RunStates() {
		form.States = append(form.States, stateBox{State: st, Checked: asked[st]})
		if asked[st] {
			f.States = append(f.States, st)
		}
	}
	if f.TenantID, err = s.tenantOf(r); err != nil {
		return ops.Filter{}, form, err
	}
	if len(f.States) != len(asked) {
		return ops.Filter{}, form, &badFilter{"unknown run state"}
	}
	if form.Space != "" {
		id, err := uuid.Parse(form.Space)
		if err != nil {
			return ops.Filter{}, form, &badFilter{"space is not a UUID"}
		}
		f.KnowledgeSpaceID = &id
	}
	if f.OlderThan, err = parseAge("older", form.Older); err != nil {
		return ops.Filter{}, form, err
	}
	if f.NewerThan, err = parseAge("newer", form.Newer); err != nil {
		return ops.Filter{}, form, err
	}
	f.ErrorCode = form.Error
	return f, form, nil
}

// parseAge reads an age filter: a Go duration (90s, 30m, 2h) or whole
// days (7d); "" is none.
func parseAge(field, s string) (time.Duration, error) {
	if s == "" {
		return 0, nil
	}
	d, err := time.ParseDuration(s)
	if days, ok := strings.CutSuffix(s, "d"); ok && err != nil {
		n, nerr := strconv.Atoi(days)
		if nerr == nil && n > 0 && n <= 100*365 {
			d, err = time.Duration(n)*24*time.Hour, nil
		}
	}
	if err != nil || d <= 0 {
		return 0, &badFilter{fmt.Sprintf("%s: want a positive age such as 30m, 2h or 7d", field)}
	}
	return d, nil
}

// filterValues are f's query parameters, canonical (ages as Go
// durations), with tenant only when set: the list's next-page link and
// the bulk forms carry them.
func filterValues(f ops.Filter, tenant string) url.Values {
	v := url.Values{}
	if tenant != "" {
		v.Set("tenant", tenant)
	}
	for _, st := range kfstype.RunStates() {
		if slices.Contains(f.States, st) {
			v.Add("state", string(st))
		}
	}
	if f.KnowledgeSpaceID != nil {
		v.Set("space", f.KnowledgeSpaceID.String())
	}
	if f.OlderThan > 0 {
		v.Set("older", f.OlderThan.String())
	}
	if f.NewerThan > 0 {
		v.Set("newer", f.NewerThan.String())
	}
	if f.ErrorCode != "" {
		v.Set("error", f.ErrorCode)
	}
	return v
}

// field is a hidden form field.
type field struct{ Name, Value string }

// hiddenFields are v as hidden form fields, in a stable order.
func hiddenFields(v url.Values) []field {
	var out []field
	keys := make([]string, 0, len(v))
	for k := range v {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		for _, val := range v[k] {
			out = append(out, field{k, val})
		}
	}
	return out
}

// filterStatus answers a filterOf error; ok is false when it did.
func (s *Server) filterStatus(w http.ResponseWriter, r *http.Request, err error) bool {
	var bad *badFilter
	switch {
	case err == nil:
		return true
	case errors.As(err, &bad):
		s.fail(w, r, http.StatusBadRequest, bad.msg)
	case errors.Is(err, errNoTenant):
		s.fail(w, r, http.StatusBadRequest, "name a tenant (?tenant=)")
	default: // repo.ErrNotFound: another tenant than the confined one
		s.fail(w, r, http.StatusNotFound, "no such tenant in this console")
	}
	return false
}
