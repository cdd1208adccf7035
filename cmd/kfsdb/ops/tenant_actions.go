package ops

// The operator actions on a tenant's limits of direct delivery, declared
// once. Each row of tenantActions is one action: its name (the audit
// line's action), its `kfsdb tenant` subcommand, what it takes besides
// the tenant and the reason, the repo method(s) that apply it with the
// words it refuses with, and the words the CLI, the console and the docs
// show. Nothing else lists them: `kfsdb tenant NAME` is built from each
// row (cli/tenant.go), the console's tenant page offers a form per row
// and validates its POST by the row (console/tenant.go,
// templates/tenant.html, console/pages.go's flashes), ChangeTenantLimits
// dispatches through the row, and docs/OPERATING.md's table of tenant
// actions is TenantActionsMarkdown, checked by tenant_actions_test.go.
//
// Adding one (docs/DEVELOPING.md, "Adding an operator action or a
// transition"): its SQL in db/queries (tenant_limits.sql), its repo
// method, one row below, its tests (tests/cli, tests/consolehttp).

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/knowledgefs/kfsdb/repo"
)

// The operator's actions on a tenant's limits of direct delivery, as
// audit lines, the console's action= and its flashes name them.
const (
	// TenantSetLimit caps a tenant's running attempts and/or limits its
	// rate of leases.
	TenantSetLimit = "tenant-set-limit"
	// TenantClearLimit lifts a tenant's cap and/or rate limit.
	TenantClearLimit = "tenant-clear-limit"
	// TenantPause pauses a tenant: no lease until it is resumed.
	TenantPause = "tenant-pause"
	// TenantResume ends a tenant's pause.
	TenantResume = "tenant-resume"
)

// TenantActionSpec is one operator action on a tenant's limits: a row of
// the table that the CLI, the console and the docs read.
type TenantActionSpec struct {
	// Name is the action: TenantChange.Action, the audit line's action,
	// the console's action= and its flash keys NAME-applied,
	// NAME-changed and NAME-refused.
	Name string
	// Command is `kfsdb tenant COMMAND TENANT`.
	Command string
	// TakesLimits says that it reads TenantChange's MaxRunning, Rate and
	// Burst (--max-running, --rate, --burst; the console's max_running,
	// rate and burst); TakesLifts, its ClearCap and ClearRate (--cap,
	// --rate; the console's clear=cap|rate). Every action takes a
	// reason; another action given these is refused as a usage error.
	TakesLimits, TakesLifts bool
	// StoresReason, when set, is what stores the operator's reason
	// besides the audit line ("the pause"); "": the audit line alone.
	StoresReason string
	// Offered says whether the console offers the action on limits l
	// (nil: a tenant that has none): where it would apply. Nil: always.
	// The repo statement decides; this only picks the forms shown.
	Offered func(l *repo.TenantLimit) bool
	// ID names the console's form (ID-form) and button (ID; with
	// TakesLifts, one button per limit: ID-cap, ID-rate).
	ID string
	// Label is the heading of the console's form; Button its button's
	// words (with TakesLifts, "Button the cap", "Button the rate limit").
	Label, Button string
	// Warn draws the console's button as a warning (class cancel).
	Warn bool
	// Does says what the action does: `kfsdb tenant COMMAND`'s help and
	// the docs' table.
	Does string
	// Refuses says, for the docs' table, when Apply refuses: its words.
	Refuses string
	// Apply makes c on tenant's limits, before as read in the same
	// transaction (nil: none), through the repo method(s). refused, when
	// not "", is why the change does not apply (TenantChangeRefused.Why):
	// nothing changed.
	Apply func(ctx context.Context, r *repo.Repo, db repo.DBTX, tenant string, c TenantChange, before *repo.TenantLimit) (refused string, err error)
}

// tenantActions is the table of operator actions on a tenant's limits,
// in the order help and the docs show them.
var tenantActions = []TenantActionSpec{
	{
		Name:        TenantSetLimit,
		Command:     "set-limit",
		TakesLimits: true,
		ID:          "set",
		Label:       "Set limits",
		Button:      "Set",
		Does:        "cap a tenant's running attempts and/or limit its leases per second, in every process",
		Refuses:     "no cap and no rate given",
		Apply: func(ctx context.Context, r *repo.Repo, db repo.DBTX, tenant string, c TenantChange, _ *repo.TenantLimit) (string, error) {
			if c.MaxRunning == 0 && c.Rate == 0 {
				return "no cap and no rate given", nil
			}
			if c.MaxRunning != 0 {
				if err := r.SetTenantLimit(ctx, db, &repo.SetTenantLimitParams{TenantID: tenant, MaxRunning: c.MaxRunning}); err != nil {
					return "", err
				}
			}
			if c.Rate != 0 {
				return "", r.SetTenantRate(ctx, db, &repo.SetTenantRateParams{TenantID: tenant, Rate: c.Rate, Burst: c.burst()})
			}
			return "", nil
		},
	},
	{
		Name:       TenantClearLimit,
		Command:    "clear-limit",
		TakesLifts: true,
		Offered:    func(l *repo.TenantLimit) bool { return l != nil && (l.MaxRunning > 0 || l.Rate > 0) },
		ID:         "clear",
		Label:      "Lift limits",
		Button:     "Lift",
		Warn:       true,
		Does:       "lift a tenant's cap and/or rate limit (neither flag: both)",
		Refuses:    "the tenant has no cap and no rate limit (or not the one named)",
		Apply: func(ctx context.Context, r *repo.Repo, db repo.DBTX, tenant string, c TenantChange, before *repo.TenantLimit) (string, error) {
			clearCap, clearRate := c.ClearCap, c.ClearRate
			if !clearCap && !clearRate {
				clearCap, clearRate = before != nil && before.MaxRunning > 0, before != nil && before.Rate > 0
				if !clearCap && !clearRate {
					return "the tenant has no cap and no rate limit", nil
				}
			}
			if clearCap {
				if err := r.RemoveTenantLimit(ctx, db, &repo.RemoveTenantLimitParams{TenantID: tenant}); errors.Is(err, repo.ErrNotFound) {
					return "the tenant has no cap", nil
				} else if err != nil {
					return "", err
				}
			}
			if clearRate {
				if err := r.RemoveTenantRate(ctx, db, &repo.RemoveTenantRateParams{TenantID: tenant}); errors.Is(err, repo.ErrNotFound) {
					return "the tenant has no rate limit", nil
				} else if err != nil {
					return "", err
				}
			}
			return "", nil
		},
	},
	{
		Name:         TenantPause,
		Command:      "pause",
		StoresReason: "the pause",
		Offered:      func(l *repo.TenantLimit) bool { return l == nil || !l.Paused() },
		ID:           "pause",
		Label:        "Pause",
		Button:       "Pause: no lease until resumed",
		Warn:         true,
		Does:         "pause a tenant: no fetch in any process leases its attempts until it is resumed (they are not touched; leases held run on)",
		Refuses:      "the tenant is paused already",
		Apply: func(ctx context.Context, r *repo.Repo, db repo.DBTX, tenant string, c TenantChange, _ *repo.TenantLimit) (string, error) {
			var reason *string
			if c.Reason != "" {
				reason = &c.Reason
			}
			paused, err := r.PauseTenant(ctx, db, &repo.PauseTenantParams{TenantID: tenant, Reason: reason})
			if err == nil && paused.AlreadyPaused {
				return "the tenant is paused already", nil
			}
			return "", err
		},
	},
	{
		Name:    TenantResume,
		Command: "resume",
		Offered: func(l *repo.TenantLimit) bool { return l != nil && l.Paused() },
		ID:      "resume",
		Label:   "Resume",
		Button:  "Resume: lease its attempts again",
		Does:    "end a tenant's pause: its due attempts are leased again, idle sources woken",
		Refuses: "the tenant is not paused",
		Apply: func(ctx context.Context, r *repo.Repo, db repo.DBTX, tenant string, _ TenantChange, _ *repo.TenantLimit) (string, error) {
			err := r.ResumeTenant(ctx, db, &repo.ResumeTenantParams{TenantID: tenant})
			if errors.Is(err, repo.ErrNotFound) {
				return "the tenant is not paused", nil
			}
			return "", err
		},
	},
}

// TenantActionSpecs returns the table of tenant actions, in the order
// help and the docs show them.
func TenantActionSpecs() []TenantActionSpec { return slices.Clone(tenantActions) }

// TenantActions lists the tenant actions' names, in the table's order.
func TenantActions() []string {
	out := make([]string, len(tenantActions))
	for i, spec := range tenantActions {
		out[i] = spec.Name
	}
	return out
}

// TenantActionsTaking lists the tenant actions that take limits (limits)
// or lifts (!limits), for the words of a usage error.
func TenantActionsTaking(limits bool) []string {
	var out []string
	for _, spec := range tenantActions {
		if (limits && spec.TakesLimits) || (!limits && spec.TakesLifts) {
			out = append(out, spec.Name)
		}
	}
	return out
}

// LookupTenantAction is name's row of the table; ok is false for an
// unknown action.
func LookupTenantAction(name string) (spec TenantActionSpec, ok bool) {
	if i := slices.IndexFunc(tenantActions, func(s TenantActionSpec) bool { return s.Name == name }); i >= 0 {
		return tenantActions[i], true
	}
	return TenantActionSpec{}, false
}

// Usage is `kfsdb tenant`'s usage of the action: "set-limit TENANT
// [--max-running N] [--rate R [--burst B]] [--reason R]".
func (s TenantActionSpec) Usage() string {
	var b strings.Builder
	b.WriteString(s.Command + " TENANT")
	if s.TakesLimits {
		b.WriteString(" [--max-running N] [--rate R [--burst B]]")
	}
	if s.TakesLifts {
		b.WriteString(" [--cap] [--rate]")
	}
	b.WriteString(" [--reason R]")
	return b.String()
}

// IsOffered is Offered, nil meaning always.
func (s TenantActionSpec) IsOffered(l *repo.TenantLimit) bool {
	return s.Offered == nil || s.Offered(l)
}

// TenantActionsMarkdown is the table of tenant actions as
// docs/OPERATING.md shows it (tenant_actions_test.go checks that it
// does).
func TenantActionsMarkdown() string {
	var b strings.Builder
	b.WriteString("| action (audit line) | `kfsdb tenant` | reason stored | console | refused when | what it does |\n")
	b.WriteString("|---|---|---|---|---|---|\n")
	for _, spec := range tenantActions {
		stored := "no"
		if spec.StoresReason != "" {
			stored = "with " + spec.StoresReason
		}
		fmt.Fprintf(&b, "| `%s` | `%s` | %s | %s | %s | %s |\n", spec.Name, spec.Usage(), stored, spec.Label, spec.Refuses, spec.Does)
	}
	return b.String()
}
