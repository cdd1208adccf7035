package testfactory

import (
	"context"
	"testing"

	"github.com/knowledgefs/kfsdb/kfstype"
)

// WorkloadMix is the run states Workload cycles through: mostly ended
// attempts, as in production, with some of every live state.
var WorkloadMix = []kfstype.RunState{
	kfstype.RunStateSucceeded, kfstype.RunStateSucceeded, kfstype.RunStateSucceeded,
	kfstype.RunStateDispatchPending, kfstype.RunStateRunning, kfstype.RunStateFailed,
	kfstype.RunStateSucceeded, kfstype.RunStateQueued, kfstype.RunStateRetryWait,
	kfstype.RunStateCanceled, kfstype.RunStateSucceeded, kfstype.RunStateSuperseded,
}

// Workload starts perTenant attempts for each tenant, each in its own
// document scope, and walks the i-th one to WorkloadMix[i % len] with
// InState: a database that looks like one a console or a report reads.
// It returns each tenant's attempts in start order.
func Workload(ctx context.Context, t testing.TB, d *Driver, tenants []string, perTenant int) map[string][]*kfstype.Attempt {
	t.Helper()
	out := map[string][]*kfstype.Attempt{}
	for _, tenant := range tenants {
		for i := range perTenant {
			s := NewScope(ctx, t, d.DB, &ScopeOpts{TenantID: &tenant})
			out[tenant] = append(out[tenant], d.InState(ctx, t, s, WorkloadMix[i%len(WorkloadMix)]))
		}
	}
	return out
}
