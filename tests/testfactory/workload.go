package testfactory

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

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

// WorkloadOpts tunes Workload; every field is optional.
type WorkloadOpts struct {
	// Clock, when set, is the driver's Repo clock, advanced by Step before
	// each attempt, so the attempts start and end over a span of time (a
	// throughput per minute, leases and relay locks that expire). Defaults
	// to nil: the attempts are made as fast as they can be.
	Clock *Clock
	// Step is how far Clock advances per attempt. Defaults to 0.
	Step time.Duration
}

// Workload starts perTenant attempts for each tenant, tenants taking
// turns, each in its own document scope, and walks the i-th of a tenant to
// WorkloadMix[i % len] with InState: a database that looks like one a
// console or a report reads. It returns each tenant's attempts in start
// order.
func Workload(ctx context.Context, t testing.TB, d *Driver, tenants []string, perTenant int, opts *WorkloadOpts) map[string][]*kfstype.Attempt {
	t.Helper()
	if opts == nil {
		opts = &WorkloadOpts{}
	}
	out := map[string][]*kfstype.Attempt{}
	for i := range perTenant {
		for _, tenant := range tenants {
			if opts.Clock != nil {
				opts.Clock.Advance(opts.Step)
			}
			s := NewScope(ctx, t, d.DB, &ScopeOpts{TenantID: &tenant})
			out[tenant] = append(out[tenant], d.InState(ctx, t, s, WorkloadMix[i%len(WorkloadMix)]))
		}
	}
	return out
}

// FirstInState returns the first of attempts that Workload left in state.
func FirstInState(t testing.TB, attempts []*kfstype.Attempt, state kfstype.RunState) *kfstype.Attempt {
	t.Helper()
	for _, a := range attempts {
		if a.RunState == state {
			return a
		}
	}
	require.FailNow(t, "no attempt in state", "%s", state)
	return nil
}
