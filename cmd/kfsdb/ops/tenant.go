package ops

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/knowledgefs/kfsdb/repo"
)

// LimitSummary says in words what l limits, for a person and for an
// audit line's from and to: "cap 4, 2.5 leases/s (burst 3), paused since
// 2026-12-06T17:12:37Z"; "none" for nil (a tenant that is not limited).
// The bucket's tokens change by the second and are left out.
func LimitSummary(l *repo.TenantLimit) string {
	if l == nil {
		return "none"
	}
	var parts []string
	if l.MaxRunning > 0 {
		parts = append(parts, fmt.Sprintf("cap %d", l.MaxRunning))
	}
	if l.Rate > 0 {
		parts = append(parts, fmt.Sprintf("%s leases/s (burst %d)", FormatRate(l.Rate), l.Burst))
	}
	if l.PausedAt != nil {
		parts = append(parts, "paused since "+l.PausedAt.UTC().Format(time.RFC3339))
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, ", ")
}

// FormatRate writes a rate of leases per second as briefly as it reads
// exactly: 2, 0.5, 0.001.
func FormatRate(r float64) string { return strconv.FormatFloat(r, 'f', -1, 64) }

// TenantChange is one change of a tenant's limits, as `kfsdb tenant`
// (cli.TenantChangeOpts embeds it) and the console's tenant page make it.
type TenantChange struct {
	// Action is the change: a Name of the table of tenant actions
	// (TenantActions: TenantSetLimit, TenantClearLimit, TenantPause,
	// TenantResume). Required.
	Action string
	// MaxRunning, with an action that takes limits (TenantSetLimit),
	// caps the tenant's running attempts (> 0). Defaults to 0: the cap is
	// not changed.
	MaxRunning int32
	// Rate, with an action that takes limits, limits the tenant to this
	// many leases per second (> 0). Defaults to 0: the rate is not
	// changed.
	Rate float64
	// Burst, with Rate, is the most leases at once (the bucket's size).
	// Defaults to 0: one second's worth, at least 1.
	Burst int32
	// ClearCap and ClearRate, with an action that takes lifts
	// (TenantClearLimit), name the limits lifted. Default to false both:
	// each of the two the tenant has.
	ClearCap, ClearRate bool
	// Reason is why the operator acts, for the audit line; with
	// TenantPause it is stored as the pause's reason too. Defaults to "":
	// none given.
	Reason string
	// Seen, when not "", is the limits' LimitSummary the operator saw:
	// the change is refused (*TenantChangeRefused) when the limits read
	// in its transaction are other. Defaults to "": no such check.
	Seen string
}

// burst is Burst, or its default: one second's worth of Rate, at least 1.
func (c TenantChange) burst() int32 {
	if c.Burst > 0 {
		return c.Burst
	}
	return int32(min(max(1, math.Ceil(c.Rate)), repo.MaxTenantBurst))
}

// TenantChangeRefused is ChangeTenantLimits' refusal of a change that
// does not apply (resuming a tenant that is not paused, pausing one that
// is, lifting a limit it has not): nothing changed.
type TenantChangeRefused struct {
	// Why says it in words.
	Why string
	// Stale is set when the limits were not those of TenantChange.Seen.
	Stale bool
}

func (e *TenantChangeRefused) Error() string { return e.Why }

// TenantChangeResult is a tenant's limits around a change; nil is none.
type TenantChangeResult struct {
	Before, After *repo.TenantLimit
}

// ChangeTenantLimits makes c on tenant's limits through its row of the
// table of tenant actions (TenantActionSpec.Apply), on db: run it in a
// transaction, so that the limits read before and after are the
// change's. The result is nil when the limits could not be read, and
// holds Before alone when the change was refused (*TenantChangeRefused)
// or failed.
func ChangeTenantLimits(ctx context.Context, r *repo.Repo, db repo.DBTX, tenant string, c TenantChange) (*TenantChangeResult, error) {
	before, err := TenantLimits(ctx, r, db, tenant)
	if err != nil {
		return nil, err
	}
	res := &TenantChangeResult{Before: before}
	if c.Seen != "" && LimitSummary(before) != c.Seen {
		return res, &TenantChangeRefused{Why: fmt.Sprintf("the limits changed since they were read (%s, now %s)", c.Seen, LimitSummary(before)), Stale: true}
	}
	spec, ok := LookupTenantAction(c.Action)
	if !ok {
		return nil, fmt.Errorf("unknown tenant action %q: want %s", c.Action, OrList(TenantActions()))
	}
	why, err := spec.Apply(ctx, r, db, tenant, c, before)
	if why != "" {
		return res, &TenantChangeRefused{Why: why}
	}
	if err != nil {
		return res, err
	}
	if res.After, err = TenantLimits(ctx, r, db, tenant); err != nil {
		return res, err
	}
	return res, nil
}

// TenantLimits reads tenant's limits; nil when it has none.
func TenantLimits(ctx context.Context, r *repo.Repo, db repo.DBTX, tenant string) (*repo.TenantLimit, error) {
	l, err := r.GetTenantLimit(ctx, db, &repo.GetTenantLimitParams{TenantID: tenant})
	if errors.Is(err, repo.ErrNotFound) {
		return nil, nil
	}
	return l, err
}
