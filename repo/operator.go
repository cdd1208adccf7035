package repo

// The operator reads, the Go twin of db/queries/operator.sql and in its
// order: ListAttempts, CountAttempts, OutboxBacklog, ListStuck (in
// operator_stuck.go) and Throughput. Each is bounded by a limit or a count cap, so its cost does
// not grow with the retained history.

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/google/uuid"

	"github.com/knowledgefs/kfsdb/db/gen"
	"github.com/knowledgefs/kfsdb/kfstype"
)

// Bounds of the operator reads (ListAttempts, CountAttempts,
// OutboxBacklog, ListStuck).
const (
	// MaxListLimit bounds ListAttemptsParams.Limit and ListStuckParams.Limit.
	MaxListLimit = 1000
	// CountCapDefault is CountAttemptsParams.Cap and OutboxBacklogParams.Cap
	// when zero: counts stop there.
	CountCapDefault = 10_000
	// MaxCountCap bounds CountAttemptsParams.Cap and OutboxBacklogParams.Cap.
	MaxCountCap = 1_000_000
	// PendingOverdueDefault is ListStuckParams.PendingOverdue when zero.
	PendingOverdueDefault = 5 * time.Minute
)

// AttemptCursor is where a page of ListAttempts ends: the last attempt's
// completion time (nil while it is live) and id. Pass it back as
// ListAttemptsParams.After for the next page.
type AttemptCursor struct {
	// CompletedAt is the last attempt's completion time; nil while it is
	// live.
	CompletedAt *time.Time
	// ID is the last attempt's id.
	ID uuid.UUID
}

// ListAttemptsParams selects a page of a tenant's attempts.
type ListAttemptsParams struct {
	// TenantID is 1..255 characters.
	TenantID string
	// States are the run states listed: 1..8 distinct valid states.
	States []kfstype.RunState
	// KnowledgeSpaceID narrows the list to one space. Defaults to nil:
	// every space of the tenant.
	KnowledgeSpaceID *uuid.UUID
	// After is the previous page's AttemptPage.Next. Defaults to nil: the
	// first page.
	After *AttemptCursor
	// Limit is the page size, 1..MaxListLimit.
	Limit int32
	// OlderThan keeps the attempts older than it: ended more than
	// OlderThan ago, or, while live, created more than OlderThan ago (by
	// the statement's clock). Defaults to 0: no bound.
	OlderThan time.Duration
	// NewerThan keeps the attempts at most NewerThan old, measured the
	// same way. Defaults to 0: no bound.
	NewerThan time.Duration
	// LastErrorCode keeps the attempts whose last error code is it (at
	// most MaxErrorCodeLength characters). Defaults to "": any code, or
	// none.
	LastErrorCode string
}

// AttemptPage is one page of ListAttempts.
type AttemptPage struct {
	// Attempts are the page's attempts, in ListAttempts' order.
	Attempts []*kfstype.Attempt
	// Next is the cursor of the following page; nil when this page is the
	// last (it holds fewer than Limit attempts).
	Next *AttemptCursor
}

func (p *ListAttemptsParams) validate(v *validator) {
	if !set(v, "ListAttemptsParams", p) {
		return
	}
	v.text("TenantID", p.TenantID, MaxTenantIDLength)
	v.runStates("States", p.States)
	if p.KnowledgeSpaceID != nil {
		v.uuid("KnowledgeSpaceID", *p.KnowledgeSpaceID)
	}
	if p.After != nil {
		v.uuid("After.ID", p.After.ID)
		if p.After.CompletedAt != nil {
			v.timestamp("After.CompletedAt", *p.After.CompletedAt)
		}
	}
	v.between("Limit", p.Limit, 1, MaxListLimit)
	if p.OlderThan != 0 {
		v.duration("OlderThan", p.OlderThan)
	}
	if p.NewerThan != 0 {
		v.duration("NewerThan", p.NewerThan)
	}
	if p.LastErrorCode != "" {
		v.text("LastErrorCode", p.LastErrorCode, MaxErrorCodeLength)
	}
}

// runStates checks a non-empty list of distinct, known run states.
func (v *validator) runStates(field string, states []kfstype.RunState) {
	if len(states) == 0 {
		v.fail(field, "must name at least one run state")
		return
	}
	for i, s := range states {
		if !s.Live() && !s.Terminal() {
			v.fail(field, fmt.Sprintf("holds %q, which is not a run state", s))
			return
		}
		if slices.Contains(states[:i], s) {
			v.fail(field, fmt.Sprintf("holds %q twice", s))
			return
		}
	}
}

func (v *validator) between(field string, n, lo, hi int32) {
	if n < lo || n > hi {
		v.fail(field, fmt.Sprintf("must be between %d and %d", lo, hi))
	}
}

// ListAttempts lists a tenant's attempts in the given run states (and,
// when asked, of an age and a last error code), live attempts first
// (newest first), then terminal ones (most recently completed first): the
// order of tenant_completed_idx, so a page costs about Limit index
// entries whatever the history, plus the entries of other states (or
// error codes) it skips. The age bounds of terminal attempts are bounds
// of that range scan. Pages are keyset-paginated: attempts started
// during a walk never shift it (they sort before the cursor), so no
// attempt is listed twice or skipped because of them. An attempt that
// changes run state during a walk may be missed or, when both halves
// are asked for, listed again as terminal.
//
// Errors: *InputError.
func (r *Repo) ListAttempts(ctx context.Context, db DBTX, p *ListAttemptsParams) (*AttemptPage, error) {
	v := r.call(ctx, db)
	p.validate(v)
	if err := v.result(); err != nil {
		return nil, err
	}
	states := make([]string, len(p.States))
	live, terminal := false, false
	for i, s := range p.States {
		states[i] = string(s)
		live, terminal = live || s.Live(), terminal || s.Terminal()
	}
	q := &gen.ListAttemptsParams{
		TenantID: p.TenantID, RunStates: states, KnowledgeSpaceID: p.KnowledgeSpaceID, RowLimit: p.Limit,
		OlderThan: p.OlderThan, NewerThan: p.NewerThan, LastErrorCode: p.LastErrorCode, Now: r.now(),
		// Past the live half once the cursor holds a completion time.
		ScanLive: live && (p.After == nil || p.After.CompletedAt == nil), ScanTerminal: terminal,
	}
	if p.After != nil {
		q.AfterID, q.AfterCompletedAt = &p.After.ID, p.After.CompletedAt
	}
	rows, err := r.q.ListAttempts(ctx, customPlanned{db}, q)
	if err != nil {
		return nil, fmt.Errorf("list attempts of tenant %q: %w", p.TenantID, mapError(err))
	}
	page := &AttemptPage{Attempts: make([]*kfstype.Attempt, len(rows))}
	for i, row := range rows {
		page.Attempts[i] = attemptFromRow(row)
	}
	if len(rows) == int(p.Limit) {
		last := page.Attempts[len(rows)-1]
		page.Next = &AttemptCursor{CompletedAt: last.CompletedAt, ID: last.ID}
	}
	return page, nil
}

// CountAttemptsParams selects CountAttempts' scope and cap.
type CountAttemptsParams struct {
	// TenantID is the tenant counted (1..255 characters); it must be
	// empty when AllTenants is set.
	TenantID string
	// AllTenants counts every tenant's attempts. Defaults to false.
	AllTenants bool
	// Cap is where each count stops (1..MaxCountCap). Defaults to
	// CountCapDefault.
	Cap int32
}

// StateCount is the number of attempts in one run state.
type StateCount struct {
	// State is the run state counted.
	State kfstype.RunState
	// N is the count: exact when Exact, otherwise the cap, and there are
	// at least N (AtLeast).
	N int64
	// Exact is set when N is the whole count.
	Exact bool
	// AtLeast is set when the count stopped at the cap: there are N or
	// more.
	AtLeast bool
}

// CountAttempts counts attempts per run state, in kfstype.RunStates()
// order, every state present. Each count stops at the cap, so it costs at
// most Cap index entries whatever the history: a count that reached it
// is reported as N = Cap, AtLeast. A tenant's count reads
// tenant_completed_idx (or run_schedule_idx for a state the planner
// finds rare); AllTenants reads run_schedule_idx alone, index-only.
//
// Errors: *InputError.
func (r *Repo) CountAttempts(ctx context.Context, db DBTX, p *CountAttemptsParams) ([]StateCount, error) {
	v := r.call(ctx, db)
	if set(v, "CountAttemptsParams", p) {
		v.tenantScope(p.TenantID, p.AllTenants)
		v.cap("Cap", p.Cap)
	}
	if err := v.result(); err != nil {
		return nil, err
	}
	limit := capOrDefault(p.Cap) + 1
	var n [8]int64
	if p.AllTenants {
		row, err := r.q.CountAttemptsAllTenants(ctx, customPlanned{db}, limit)
		if err != nil {
			return nil, fmt.Errorf("count attempts of all tenants: %w", mapError(err))
		}
		n = [8]int64{row.DispatchPending, row.Queued, row.Running, row.RetryWait, row.Succeeded, row.Failed, row.Canceled, row.Superseded}
	} else {
		row, err := r.q.CountAttempts(ctx, customPlanned{db}, &gen.CountAttemptsParams{TenantID: p.TenantID, CountLimit: limit})
		if err != nil {
			return nil, fmt.Errorf("count attempts of tenant %q: %w", p.TenantID, mapError(err))
		}
		n = [8]int64{row.DispatchPending, row.Queued, row.Running, row.RetryWait, row.Succeeded, row.Failed, row.Canceled, row.Superseded}
	}
	out := make([]StateCount, len(n))
	for i, s := range kfstype.RunStates() {
		out[i] = StateCount{State: s, N: n[i], Exact: true}
		if n[i] >= int64(limit) {
			out[i] = StateCount{State: s, N: int64(limit - 1), AtLeast: true}
		}
	}
	return out, nil
}

// tenantScope checks a read's scope: one tenant (1..255 characters), or
// every tenant with TenantID empty.
func (v *validator) tenantScope(tenantID string, allTenants bool) {
	if !allTenants {
		v.text("TenantID", tenantID, MaxTenantIDLength)
	} else if tenantID != "" {
		v.fail("TenantID", "must be empty with AllTenants")
	}
}

func (v *validator) cap(field string, c int32) {
	if c != 0 {
		v.between(field, c, 1, MaxCountCap)
	}
}

func capOrDefault(c int32) int32 {
	if c == 0 {
		return CountCapDefault
	}
	return c
}

// OutboxBacklogParams tunes OutboxBacklog.
type OutboxBacklogParams struct {
	// Cap is where each count stops (1..MaxCountCap). Defaults to
	// CountCapDefault.
	Cap int32
}

// StatusCount is the number of due outbox rows in one status.
type StatusCount struct {
	// Status is the outbox status counted.
	Status kfstype.OutboxStatus
	// N is the count: exact when Exact, otherwise the cap, and there are
	// at least N (AtLeast).
	N int64
	// Exact is set when N is the whole count.
	Exact bool
	// AtLeast is set when the count stopped at the cap: there are N or
	// more.
	AtLeast bool
}

// Backlog is the outbox's due work: what a relay (or a direct worker)
// would take now.
type Backlog struct {
	// Due counts the due rows of pending, dispatching (relay lock
	// expired), dispatched (visibility deadline passed) and leased (lease
	// expired), in that order.
	Due []StatusCount
	// OldestDueAt is when the longest-waiting due row became due; nil when
	// none is due.
	OldestDueAt *time.Time
	// OldestDueAge is Now - OldestDueAt; zero when none is due.
	OldestDueAge time.Duration
	// Now is the database's clock (or the Repo's Clock) the backlog was
	// read at.
	Now time.Time
}

// OutboxBacklog counts the outbox rows due now, per status, and reads the
// oldest due time off the heads of delivery_due_idx and
// lock_recovery_idx. The outbox has no tenant column: the backlog is
// every tenant's.
//
// Errors: *InputError.
func (r *Repo) OutboxBacklog(ctx context.Context, db DBTX, p *OutboxBacklogParams) (*Backlog, error) {
	v := r.call(ctx, db)
	if set(v, "OutboxBacklogParams", p) {
		v.cap("Cap", p.Cap)
	}
	if err := v.result(); err != nil {
		return nil, err
	}
	limit := capOrDefault(p.Cap) + 1
	row, err := r.q.OutboxBacklog(ctx, db, &gen.OutboxBacklogParams{Now: r.now(), CountLimit: limit})
	if err != nil {
		return nil, fmt.Errorf("read the outbox backlog: %w", mapError(err))
	}
	b := &Backlog{Now: row.DbNow.UTC()}
	for i, n := range []int64{row.Pending, row.Dispatching, row.Dispatched, row.Leased} {
		c := StatusCount{Status: dueStatuses[i], N: n, Exact: true}
		if n >= int64(limit) {
			c = StatusCount{Status: dueStatuses[i], N: int64(limit - 1), AtLeast: true}
		}
		b.Due = append(b.Due, c)
	}
	if row.HasDue {
		b.OldestDueAt = utcPtr(&row.OldestDueAt)
		b.OldestDueAge = b.Now.Sub(*b.OldestDueAt)
	}
	return b, nil
}

var dueStatuses = []kfstype.OutboxStatus{
	kfstype.OutboxStatusPending, kfstype.OutboxStatusDispatching, kfstype.OutboxStatusDispatched, kfstype.OutboxStatusLeased,
}

// Bounds of Throughput.
const (
	// ThroughputMinutesDefault is ThroughputParams.Minutes when zero.
	ThroughputMinutesDefault = 15
	// MaxThroughputMinutes bounds ThroughputParams.Minutes: the read costs
	// one index entry per attempt ended in the window.
	MaxThroughputMinutes = 60
	// ThroughputCapDefault is ThroughputParams.Cap when zero.
	ThroughputCapDefault = 10_000
	// MaxThroughputCap bounds ThroughputParams.Cap.
	MaxThroughputCap = 1_000_000
)

// ThroughputParams selects Throughput's scope and window.
type ThroughputParams struct {
	// TenantID is the tenant looked at (1..255 characters); it must be
	// empty when AllTenants is set.
	TenantID string
	// AllTenants looks at every tenant. Defaults to false.
	AllTenants bool
	// Minutes is the window, 1..MaxThroughputMinutes whole minutes ending
	// with the current one. Defaults to ThroughputMinutesDefault.
	Minutes int32
	// Cap is the most ended attempts read (1..MaxThroughputCap), newest
	// first per tenant: past it every count is a lower bound (AtLeast).
	// Defaults to ThroughputCapDefault.
	Cap int32
}

// MinuteCount is the number of attempts that ended in one minute, per
// terminal state.
type MinuteCount struct {
	// Minute is the minute's start (UTC).
	Minute time.Time
	// Succeeded counts the attempts that succeeded in the minute.
	Succeeded int64
	// Failed counts the attempts that failed in the minute.
	Failed int64
	// Canceled counts the attempts canceled in the minute.
	Canceled int64
	// Superseded counts the attempts superseded in the minute.
	Superseded int64
	// AtLeast is set on every minute when the read stopped at
	// ThroughputParams.Cap: the counts are lower bounds.
	AtLeast bool
}

// Total is the number of attempts that ended in the minute.
func (m MinuteCount) Total() int64 { return m.Succeeded + m.Failed + m.Canceled + m.Superseded }

// Throughput counts the attempts that ended (reached a terminal state) in
// each of the last Minutes minutes, oldest first, the current, partial
// minute last; every minute is present, zeros included. It reads the
// tenant's range of tenant_completed_idx (AllTenants: each tenant's, found
// by a walk of the same index), so its cost grows with the attempts that
// ended in the window (at most Cap of them) and the number of tenants, not
// with the history.
//
// Errors: *InputError.
func (r *Repo) Throughput(ctx context.Context, db DBTX, p *ThroughputParams) ([]MinuteCount, error) {
	v := r.call(ctx, db)
	if set(v, "ThroughputParams", p) {
		v.tenantScope(p.TenantID, p.AllTenants)
		if p.Minutes != 0 {
			v.between("Minutes", p.Minutes, 1, MaxThroughputMinutes)
		}
		if p.Cap != 0 {
			v.between("Cap", p.Cap, 1, MaxThroughputCap)
		}
	}
	if err := v.result(); err != nil {
		return nil, err
	}
	minutes := p.Minutes
	if minutes == 0 {
		minutes = ThroughputMinutesDefault
	}
	limit := p.Cap
	if limit == 0 {
		limit = ThroughputCapDefault
	}
	rows, err := r.q.Throughput(ctx, customPlanned{db}, &gen.ThroughputParams{
		AllTenants: p.AllTenants, TenantID: p.TenantID, Now: r.now(), Minutes: minutes, MaxRows: limit,
	})
	if err != nil {
		return nil, fmt.Errorf("read the throughput of the last %d minutes: %w", minutes, mapError(err))
	}
	out := make([]MinuteCount, len(rows))
	var total int64
	for i, row := range rows {
		out[i] = MinuteCount{Minute: row.Minute.UTC(), Succeeded: row.Succeeded, Failed: row.Failed, Canceled: row.Canceled, Superseded: row.Superseded}
		total += out[i].Total()
	}
	if total >= int64(limit) {
		for i := range out {
			out[i].AtLeast = true
		}
	}
	return out, nil
}
