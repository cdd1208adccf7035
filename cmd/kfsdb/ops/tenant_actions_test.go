package ops

import (
	"strings"
	"testing"
	"time"

	"github.com/knowledgefs/kfsdb/repo"
)

// TestTenantActionsTableRows: every row of the table of tenant actions
// is whole (the CLI, the console and the docs read each field), names,
// commands and console ids are unique and look up, and the words built
// from rows are the ones operators have always read. Mutation: a row
// without Apply fails the first loop; Usage ignoring TakesLimits fails
// the usage; Offered of pause and resume swapped fails the offers.
func TestTenantActionsTableRows(t *testing.T) {
	seen := map[string]bool{}
	for _, spec := range TenantActionSpecs() {
		if !strings.HasPrefix(spec.Name, "tenant-") || spec.Command == "" || spec.ID == "" || spec.Label == "" || spec.Button == "" ||
			spec.Does == "" || spec.Refuses == "" || spec.Apply == nil {
			t.Errorf("%q: a row needs Name (tenant-…), Command, ID, Label, Button, Does, Refuses and Apply: %+v", spec.Name, spec)
		}
		for _, key := range []string{"name " + spec.Name, "command " + spec.Command, "id " + spec.ID} {
			if seen[key] {
				t.Errorf("%s is declared twice", key)
			}
			seen[key] = true
		}
		if got, ok := LookupTenantAction(spec.Name); !ok || got.Name != spec.Name {
			t.Errorf("LookupTenantAction(%q) = %q, %v", spec.Name, got.Name, ok)
		}
	}
	if _, ok := LookupTenantAction("tenant-delete"); ok {
		t.Error("tenant-delete looked up")
	}
	if got, want := OrList(TenantActions()), "tenant-set-limit, tenant-clear-limit, tenant-pause or tenant-resume"; got != want {
		t.Errorf("TenantActions: %s, want %s", got, want)
	}
	if got := OrList(TenantActionsTaking(true)) + "; " + OrList(TenantActionsTaking(false)); got != "tenant-set-limit; tenant-clear-limit" {
		t.Errorf("TenantActionsTaking: %s", got)
	}
	for name, want := range map[string]string{
		TenantSetLimit:   "set-limit TENANT [--max-running N] [--rate R [--burst B]] [--reason R]",
		TenantClearLimit: "clear-limit TENANT [--cap] [--rate] [--reason R]",
		TenantPause:      "pause TENANT [--reason R]",
	} {
		if spec, _ := LookupTenantAction(name); spec.Usage() != want {
			t.Errorf("%s: usage %q, want %q", name, spec.Usage(), want)
		}
	}
	now := time.Now()
	for _, tc := range []struct {
		limits *repo.TenantLimit
		want   string
	}{
		{nil, "tenant-set-limit tenant-pause"},
		{&repo.TenantLimit{MaxRunning: 2}, "tenant-set-limit tenant-clear-limit tenant-pause"},
		{&repo.TenantLimit{PausedAt: &now}, "tenant-set-limit tenant-resume"},
	} {
		var offered []string
		for _, spec := range TenantActionSpecs() {
			if spec.IsOffered(tc.limits) {
				offered = append(offered, spec.Name)
			}
		}
		if got := strings.Join(offered, " "); got != tc.want {
			t.Errorf("offered on %s: %s, want %s", LimitSummary(tc.limits), got, tc.want)
		}
	}
}

// TestOperatingDocShowsTheTenantTable: docs/OPERATING.md's table of
// tenant actions is the table's (TenantActionsMarkdown), so that a new
// row reaches the guide.
func TestOperatingDocShowsTheTenantTable(t *testing.T) {
	requireOperatingBlock(t, "<!-- tenant actions: ops.TenantActionsMarkdown, checked by cmd/kfsdb/ops/tenant_actions_test.go -->\n",
		"<!-- end tenant actions -->", TenantActionsMarkdown())
}
