package ops

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/knowledgefs/kfsdb/repo"
)

// The operator's actions on a tenant's limits of direct delivery
// (repo.SetTenantLimit, SetTenantRate, PauseTenant, ResumeTenant and their
// removals), as audit lines name them.
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
