package repo_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/knowledgefs/kfsdb/kfstype"
	"github.com/knowledgefs/kfsdb/repo"
)

// TestThroughputEqualsDirectCount ends attempts of two tenants in several
// minutes (on the manual clock) and checks every minute's counts against a
// plain GROUP BY, for one tenant and for all, and the window's bounds.
func TestThroughputEqualsDirectCount(t *testing.T) {
	b := setup(t)
	ctx := b.ctx
	const tenant, other = "throughput-a", "throughput-b"
	end := func(tenantID string, states ...kfstype.RunState) {
		t.Helper()
		for _, s := range states {
			b.drv.InState(ctx, t, b.tenantScope(t, tenantID), s)
		}
	}
	// 20 minutes ago: outside a 15-minute window.
	end(tenant, kfstype.RunStateSucceeded)
	b.clock.Advance(12 * time.Minute)
	end(tenant, kfstype.RunStateSucceeded, kfstype.RunStateFailed, kfstype.RunStateCanceled)
	end(other, kfstype.RunStateSucceeded)
	b.clock.Advance(5 * time.Minute)
	end(tenant, kfstype.RunStateSuperseded, kfstype.RunStateSucceeded)
	end(other, kfstype.RunStateFailed, kfstype.RunStateFailed)
	b.drv.Start(ctx, t, b.tenantScope(t, tenant), nil) // live: never counted
	b.clock.Advance(3 * time.Minute)
	now := b.clock.Now()

	direct := func(tenantID *string, minutes int) map[time.Time]repo.MinuteCount {
		t.Helper()
		rows, err := b.db.Pool.Query(ctx, `SELECT date_trunc('minute', completed_at), run_state, count(*)
			  FROM document_compilation_attempts
			 WHERE completed_at IS NOT NULL AND ($1::text IS NULL OR tenant_id = $1)
			   AND completed_at >= date_trunc('minute', $2::timestamptz) - ($3::int - 1) * interval '1 minute'
			   AND completed_at <= $2
			 GROUP BY 1, 2`, tenantID, now, minutes)
		require.NoError(t, err)
		defer rows.Close()
		out := map[time.Time]repo.MinuteCount{}
		for rows.Next() {
			var m time.Time
			var s string
			var n int64
			require.NoError(t, rows.Scan(&m, &s, &n))
			c := out[m.UTC()]
			c.Minute = m.UTC()
			switch kfstype.RunState(s) {
			case kfstype.RunStateSucceeded:
				c.Succeeded = n
			case kfstype.RunStateFailed:
				c.Failed = n
			case kfstype.RunStateCanceled:
				c.Canceled = n
			case kfstype.RunStateSuperseded:
				c.Superseded = n
			}
			out[m.UTC()] = c
		}
		require.NoError(t, rows.Err())
		return out
	}
	for _, tc := range []struct {
		p      repo.ThroughputParams
		tenant *string
		total  int64
	}{
		{repo.ThroughputParams{TenantID: tenant}, new(tenant), 5},
		{repo.ThroughputParams{AllTenants: true}, nil, 8},
		{repo.ThroughputParams{TenantID: tenant, Minutes: 4}, new(tenant), 2},
		{repo.ThroughputParams{AllTenants: true, Minutes: repo.MaxThroughputMinutes}, nil, 9},
	} {
		minutes := int(tc.p.Minutes)
		if minutes == 0 {
			minutes = repo.ThroughputMinutesDefault
		}
		got, err := b.repo.Throughput(ctx, b.db.Pool, &tc.p)
		require.NoError(t, err)
		require.Len(t, got, minutes, "one row per minute")
		require.Equal(t, now.Truncate(time.Minute), got[len(got)-1].Minute, "the current minute last")
		want := direct(tc.tenant, minutes)
		var total int64
		for i, m := range got {
			if i > 0 {
				require.Equal(t, got[i-1].Minute.Add(time.Minute), m.Minute)
			}
			w := want[m.Minute]
			w.Minute = m.Minute
			require.Equal(t, w, m)
			total += m.Total()
		}
		require.Equal(t, tc.total, total, "%+v", tc.p)
	}

	for name, p := range map[string]*repo.ThroughputParams{
		"TenantID": {}, "Minutes": {TenantID: tenant, Minutes: repo.MaxThroughputMinutes + 1},
	} {
		_, err := b.repo.Throughput(ctx, b.db.Pool, p)
		requireInputError(t, err, name)
	}
	_, err := b.repo.Throughput(ctx, b.db.Pool, &repo.ThroughputParams{AllTenants: true, TenantID: tenant})
	requireInputError(t, err, "TenantID")
}
