package repo_test

import (
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/knowledgefs/kfsdb/kfstype"
	"github.com/knowledgefs/kfsdb/repo"
	"github.com/knowledgefs/kfsdb/tests/testfactory"
)

// tenantScope is a new document version of tenant.
func (b *testBundle) tenantScope(t *testing.T, tenant string) *testfactory.Scope {
	t.Helper()
	return testfactory.NewScope(b.ctx, t, b.db.Pool, &testfactory.ScopeOpts{TenantID: &tenant})
}

// TestListAttemptsWalksPagesUnderConcurrentStarts: a walk in pages of 7
// while another goroutine starts attempts of the same tenant lists every
// attempt that existed before the walk exactly once, live ones first and
// newest first, and never another tenant's.
func TestListAttemptsWalksPagesUnderConcurrentStarts(t *testing.T) {
	b := setup(t)
	ctx := b.ctx
	const tenant = "ops-tenant"
	before := map[uuid.UUID]bool{}
	for range 20 {
		before[b.drv.Start(ctx, t, b.tenantScope(t, tenant), nil).ID] = true
	}
	for _, s := range []kfstype.RunState{kfstype.RunStateFailed, kfstype.RunStateCanceled, kfstype.RunStateCanceled} {
		before[b.drv.InState(ctx, t, b.tenantScope(t, tenant), s).ID] = true
	}
	other := b.drv.Start(ctx, t, b.scope(t), nil) // another tenant's

	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		r := repo.New(nil) // the database clock: starts race the walk for real
		for {
			select {
			case <-done:
				return
			default:
			}
			_, err := r.Start(ctx, b.db.Pool, b.tenantScope(t, tenant).StartParams())
			if err != nil {
				t.Error(err)
				return
			}
		}
	})
	seen := map[uuid.UUID]bool{}
	p := &repo.ListAttemptsParams{TenantID: tenant, States: kfstype.RunStates(), Limit: 7}
	var last *kfstype.Attempt
	for pages := 0; ; pages++ {
		require.Less(t, pages, 100)
		page, err := b.repo.ListAttempts(ctx, b.db.Pool, p)
		require.NoError(t, err)
		for _, a := range page.Attempts {
			require.Equal(t, tenant, a.TenantID)
			require.NotEqual(t, other.ID, a.ID)
			require.False(t, seen[a.ID], "attempt %s listed twice", a.ID)
			seen[a.ID] = true
			if last != nil && last.CompletedAt == nil && a.CompletedAt == nil {
				require.Less(t, a.ID.String(), last.ID.String(), "live attempts newest first")
			}
			if last != nil && last.CompletedAt != nil {
				require.NotNil(t, a.CompletedAt, "a live attempt after a terminal one")
				require.False(t, a.CompletedAt.After(*last.CompletedAt), "terminal attempts most recently completed first")
			}
			last = a
		}
		if page.Next == nil {
			break
		}
		p.After = page.Next
	}
	close(done)
	wg.Wait()
	for id := range before {
		require.True(t, seen[id], "attempt %s from before the walk was missed", id)
	}

	// A filter by state and space.
	failed, err := b.repo.ListAttempts(ctx, b.db.Pool, &repo.ListAttemptsParams{TenantID: tenant,
		States: []kfstype.RunState{kfstype.RunStateFailed}, Limit: 10})
	require.NoError(t, err)
	require.Len(t, failed.Attempts, 1)
	require.Nil(t, failed.Next)
	s := b.tenantScope(t, tenant)
	inSpace := b.drv.Start(ctx, t, s, nil)
	page, err := b.repo.ListAttempts(ctx, b.db.Pool, &repo.ListAttemptsParams{TenantID: tenant,
		States: []kfstype.RunState{kfstype.RunStateDispatchPending}, KnowledgeSpaceID: &s.KnowledgeSpaceID, Limit: 10})
	require.NoError(t, err)
	require.Len(t, page.Attempts, 1)
	require.Equal(t, inSpace.ID, page.Attempts[0].ID)
}

// directCount counts attempts per run state with a plain GROUP BY.
func (b *testBundle) directCount(t *testing.T, tenant *string) map[kfstype.RunState]int64 {
	t.Helper()
	rows, err := b.db.Pool.Query(b.ctx, `SELECT run_state, count(*) FROM document_compilation_attempts
		WHERE $1::text IS NULL OR tenant_id = $1 GROUP BY run_state`, tenant)
	require.NoError(t, err)
	defer rows.Close()
	out := map[kfstype.RunState]int64{}
	for rows.Next() {
		var s string
		var n int64
		require.NoError(t, rows.Scan(&s, &n))
		out[kfstype.RunState(s)] = n
	}
	require.NoError(t, rows.Err())
	return out
}

// TestCountAttemptsEqualsDirectCount: under the cap every state's count is
// exact and equals a GROUP BY; over it, N is the cap and labelled AtLeast.
// Another tenant's attempts never count for a tenant.
func TestCountAttemptsEqualsDirectCount(t *testing.T) {
	b := setup(t)
	ctx := b.ctx
	const tenant = "count-tenant"
	for _, s := range kfstype.RunStates() {
		b.drv.InState(ctx, t, b.tenantScope(t, tenant), s)
	}
	for range 3 {
		b.drv.Start(ctx, t, b.tenantScope(t, tenant), nil)
	}
	b.drv.InState(ctx, t, b.scope(t), kfstype.RunStateFailed) // another tenant's

	for _, all := range []bool{false, true} {
		p := &repo.CountAttemptsParams{TenantID: tenant}
		want := b.directCount(t, new(tenant))
		if all {
			p = &repo.CountAttemptsParams{AllTenants: true}
			want = b.directCount(t, nil)
		}
		counts, err := b.repo.CountAttempts(ctx, b.db.Pool, p)
		require.NoError(t, err)
		require.Len(t, counts, len(kfstype.RunStates()))
		for i, c := range counts {
			require.Equal(t, kfstype.RunStates()[i], c.State)
			require.Equal(t, repo.StateCount{State: c.State, N: want[c.State], Exact: true}, c, "all tenants: %v", all)
		}
	}

	// Cap 2: dispatch_pending (4) is over it, failed (1) under it.
	counts, err := b.repo.CountAttempts(ctx, b.db.Pool, &repo.CountAttemptsParams{TenantID: tenant, Cap: 2})
	require.NoError(t, err)
	require.Equal(t, repo.StateCount{State: kfstype.RunStateDispatchPending, N: 2, AtLeast: true}, counts[0])
	require.Equal(t, repo.StateCount{State: kfstype.RunStateFailed, N: 1, Exact: true}, counts[5])
	counts, err = b.repo.CountAttempts(ctx, b.db.Pool, &repo.CountAttemptsParams{AllTenants: true, Cap: 1})
	require.NoError(t, err)
	require.Equal(t, repo.StateCount{State: kfstype.RunStateFailed, N: 1, AtLeast: true}, counts[5])
}

// TestListStuckReportsEachReason drives a real attempt into each stuck
// situation with the clock, and checks the reason, the tenant confinement
// and the backlog the same rows make.
func TestListStuckReportsEachReason(t *testing.T) {
	b := setup(t)
	ctx := b.ctx
	const tenant = "stuck-tenant"
	scope := func() *testfactory.Scope { return b.tenantScope(t, tenant) }

	// Running; its lease (60 s) expires.
	running, lease, _ := b.drv.Running(ctx, t, scope(), nil)
	// Claimed by a relay whose lock (30 s default) expires.
	claimed := b.drv.Start(ctx, t, scope(), nil)
	b.drv.Claim(ctx, t, claimed.ID)
	// Published; nobody takes it before the visibility deadline (60 s).
	queued := b.drv.Start(ctx, t, scope(), nil)
	b.drv.Dispatch(ctx, t, queued.ID, nil)
	// Pending, due later than the others and never claimed.
	pending := b.drv.Start(ctx, t, scope(), &testfactory.StartOpts{AvailableAt: new(b.clock.Now().Add(time.Second))})
	// A dead outbox row under a live attempt: no transition writes it.
	dead := b.drv.Start(ctx, t, scope(), &testfactory.StartOpts{Deferred: new(true)})
	_, err := b.db.Pool.Exec(ctx, `UPDATE document_compilation_outbox SET status = 'dead' WHERE attempt_id = $1`, dead.ID)
	require.NoError(t, err)
	// Another tenant's lost lease.
	otherRunning, _, _ := b.drv.Running(ctx, t, b.scope(t), nil)

	list := func(p *repo.ListStuckParams) map[uuid.UUID]repo.StuckReason {
		t.Helper()
		stuck, err := b.repo.ListStuck(ctx, b.db.Pool, p)
		require.NoError(t, err)
		out := map[uuid.UUID]repo.StuckReason{}
		for i, s := range stuck {
			require.NotEmpty(t, s.Reason.Description())
			require.Equal(t, s.Attempt.ID, s.Outbox.AttemptID)
			if i > 0 {
				require.False(t, s.Since.Before(stuck[i-1].Since), "longest stuck first")
			}
			out[s.Attempt.ID] = s.Reason
		}
		return out
	}
	require.Equal(t, map[uuid.UUID]repo.StuckReason{dead.ID: repo.StuckDeadNotTerminal},
		list(&repo.ListStuckParams{TenantID: tenant, Limit: 100}), "only the dead row is stuck at once")

	b.clock.Advance(2 * time.Minute)
	require.Equal(t, map[uuid.UUID]repo.StuckReason{
		running.ID: repo.StuckLeaseExpired, claimed.ID: repo.StuckRelayLockExpired,
		queued.ID: repo.StuckVisibilityExpired, dead.ID: repo.StuckDeadNotTerminal,
	}, list(&repo.ListStuckParams{TenantID: tenant, Limit: 100}), "pending is due for under 5 minutes")
	b.clock.Advance(5 * time.Minute)
	got := list(&repo.ListStuckParams{TenantID: tenant, Limit: 100})
	require.Equal(t, repo.StuckPendingOverdue, got[pending.ID])
	require.Len(t, got, 5)
	require.NotContains(t, got, otherRunning.ID)
	all := list(&repo.ListStuckParams{AllTenants: true, Limit: 100})
	require.Equal(t, repo.StuckLeaseExpired, all[otherRunning.ID])
	require.Len(t, list(&repo.ListStuckParams{AllTenants: true, Limit: 2}), 2)
	_ = lease

	backlog, err := b.repo.OutboxBacklog(ctx, b.db.Pool, &repo.OutboxBacklogParams{})
	require.NoError(t, err)
	require.Equal(t, []repo.StatusCount{
		{Status: kfstype.OutboxStatusPending, N: 1, Exact: true},
		{Status: kfstype.OutboxStatusDispatching, N: 1, Exact: true},
		{Status: kfstype.OutboxStatusDispatched, N: 1, Exact: true},
		{Status: kfstype.OutboxStatusLeased, N: 2, Exact: true},
	}, backlog.Due)
	require.Equal(t, b.clock.Now(), backlog.Now)
	require.NotNil(t, backlog.OldestDueAt)
	require.Equal(t, backlog.Now.Sub(*backlog.OldestDueAt), backlog.OldestDueAge)
	capped, err := b.repo.OutboxBacklog(ctx, b.db.Pool, &repo.OutboxBacklogParams{Cap: 1})
	require.NoError(t, err)
	require.Equal(t, repo.StatusCount{Status: kfstype.OutboxStatusLeased, N: 1, AtLeast: true}, capped.Due[3])
}

// TestListAttemptsByAgeAndErrorCode: the age filters measure from when an
// attempt ended or, while it is live, from when it was created, and the
// code filter matches last_error_code, on both halves of the list; every
// walk in pages of 2 equals a plain query over coalesce(completed_at,
// created_at). Mutations: the terminal half bounding created_at instead
// of completed_at fails the canceled-later attempts' windows; the live
// half's age filter dropped fails "older 25m".
func TestListAttemptsByAgeAndErrorCode(t *testing.T) {
	b := setup(t)
	ctx := b.ctx
	const tenant = "age-tenant"
	// Twelve attempts ten minutes apart; every other one is then canceled
	// later, five minutes apart, half of those with a reason (error code
	// CANCELED); one fails, one waits for a retry (a live attempt with a
	// code), and another tenant has one of each.
	var started []*kfstype.Attempt
	for range 12 {
		b.clock.Advance(10 * time.Minute)
		started = append(started, b.drv.Start(ctx, t, b.tenantScope(t, tenant), nil))
	}
	for i := 1; i < len(started); i += 2 {
		b.clock.Advance(5 * time.Minute)
		p := &repo.CancelParams{AttemptRef: repo.AttemptRef{TenantID: tenant, KnowledgeSpaceID: started[i].KnowledgeSpaceID, AttemptID: started[i].ID}}
		if i%4 == 1 {
			p.Reason = new("operator")
		}
		_, err := b.repo.Cancel(ctx, b.db.Pool, p)
		require.NoError(t, err)
	}
	b.clock.Advance(10 * time.Minute)
	b.drv.InState(ctx, t, b.tenantScope(t, tenant), kfstype.RunStateFailed)
	b.drv.InState(ctx, t, b.tenantScope(t, tenant), kfstype.RunStateRetryWait)
	b.drv.InState(ctx, t, b.scope(t), kfstype.RunStateFailed)
	b.drv.InState(ctx, t, b.scope(t), kfstype.RunStateRetryWait)
	b.clock.Advance(time.Minute)
	now := b.clock.Now()

	for _, tc := range []struct {
		name         string
		older, newer time.Duration
		code         string
	}{
		{"all", 0, 0, ""},
		{"older 25m", 25 * time.Minute, 0, ""},
		{"older 90m", 90 * time.Minute, 0, ""},
		{"newer 50m", 0, 50 * time.Minute, ""},
		{"between 40m and 100m", 40 * time.Minute, 100 * time.Minute, ""},
		{"canceled with a reason", 0, 0, kfstype.ErrorCodeCanceled},
		{"retryable, live", 0, 0, kfstype.ErrorCodeCompilationRetryable},
		{"code and age", 30 * time.Minute, 0, kfstype.ErrorCodeCanceled},
		{"no such code", 0, 0, "NO_SUCH_CODE"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rows, err := b.db.Pool.Query(ctx, `SELECT id FROM document_compilation_attempts
				WHERE tenant_id = $1
				  AND ($2::interval = '0' OR coalesce(completed_at, created_at) < $5::timestamptz - $2::interval)
				  AND ($3::interval = '0' OR coalesce(completed_at, created_at) >= $5::timestamptz - $3::interval)
				  AND ($4 = '' OR last_error_code = $4)
				ORDER BY completed_at DESC NULLS FIRST, id DESC`, tenant, tc.older, tc.newer, tc.code, now)
			require.NoError(t, err)
			want, err := pgx.CollectRows(rows, pgx.RowTo[uuid.UUID])
			require.NoError(t, err)
			got := []uuid.UUID{}
			p := &repo.ListAttemptsParams{TenantID: tenant, States: kfstype.RunStates(), Limit: 2,
				OlderThan: tc.older, NewerThan: tc.newer, LastErrorCode: tc.code}
			for pages := 0; ; pages++ {
				require.Less(t, pages, 20)
				page, err := b.repo.ListAttempts(ctx, b.db.Pool, p)
				require.NoError(t, err)
				for _, a := range page.Attempts {
					got = append(got, a.ID)
				}
				if page.Next == nil {
					break
				}
				p.After = page.Next
			}
			require.Equal(t, want, got)
		})
	}
	// The cases are not vacuous: some match a part, none all or nothing
	// but the two meant to.
	n := func(older, newer time.Duration, code string) int {
		var c int
		require.NoError(t, b.db.Pool.QueryRow(ctx, `SELECT count(*) FROM document_compilation_attempts WHERE tenant_id = $1
			AND ($2::interval = '0' OR coalesce(completed_at, created_at) < $5::timestamptz - $2::interval)
			AND ($3::interval = '0' OR coalesce(completed_at, created_at) >= $5::timestamptz - $3::interval)
			AND ($4 = '' OR last_error_code = $4)`, tenant, older, newer, code, now).Scan(&c))
		return c
	}
	require.Equal(t, 14, n(0, 0, ""))
	for _, c := range []int{n(25*time.Minute, 0, ""), n(0, 50*time.Minute, ""), n(40*time.Minute, 100*time.Minute, ""), n(0, 0, kfstype.ErrorCodeCanceled)} {
		require.Greater(t, c, 0)
		require.Less(t, c, 14)
	}
}
