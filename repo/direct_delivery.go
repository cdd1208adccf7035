package repo

// Direct delivery's one transition, the Go twin of
// db/queries/direct_delivery.sql: FetchLeases.

import (
	"cmp"
	"context"
	"fmt"
	"sort"
	"time"

	"github.com/knowledgefs/kfsdb/db/gen"
	"github.com/knowledgefs/kfsdb/kfstype"
)

// Direct delivery defaults: a zero FetchLeasesParams field means them.
const (
	// FetchMaxTenantsDefault is FetchLeasesParams.MaxTenants' default.
	FetchMaxTenantsDefault = 64
)

// MaxFetchTenants bounds FetchLeasesParams.MaxTenants: the tenants one
// fetch walks, each an index descent and a probe.
const MaxFetchTenants = 1000

// MaxTenantList bounds FetchLeasesParams.Tenants and ExcludeTenants: each
// fetch sends its list, and checks a walked tenant against the exclude
// list entry by entry.
const MaxTenantList = 1000

// FetchLeasesParams asks for due attempts to run, leased to one worker.
type FetchLeasesParams struct {
	// WorkerID names the worker the leases are taken for (worker_id),
	// 1..255 characters. A fetch that leases rows also ends this id's idle
	// registration (OutboxListenerIdle).
	WorkerID string
	// BatchSize is 1..MaxBatchSize: the worker's free slots.
	BatchSize int32
	// LeaseDuration must be > 0. Defaults to LeaseDurationDefault.
	LeaseDuration time.Duration
	// AfterTenant is where the walk over tenants starts (the first tenant
	// after it in tenant_id order, wrapping). Pass the previous result's
	// NextAfterTenant to go round the tenants. Defaults to "": from the
	// first tenant.
	AfterTenant string
	// MaxTenants (1..MaxFetchTenants) bounds the tenants one fetch looks
	// at. Defaults to FetchMaxTenantsDefault.
	MaxTenants int32
	// PerTenant (1..MaxBatchSize) bounds what one tenant may get in one
	// fetch. Defaults to BatchSize: tenants are interleaved round by round
	// (every tenant's oldest due attempt, then every tenant's second, …),
	// and a tenant alone still fills the batch.
	PerTenant int32
	// TraceContexts asks for each lease's Start trace context (migration
	// 0009) in the same round trip, in LeasedAttempt.TraceContext.
	// Defaults to false.
	TraceContexts bool
	// Tenants, when not nil, are the only tenants the fetch serves (an
	// include list): the walk goes down this list (bytewise order, from
	// the first after AfterTenant, wrapping) instead of every tenant, at
	// most MaxTenants of it per fetch, with the same fairness and caps.
	// 1..MaxTenantList distinct tenant ids; an empty list is refused (it
	// would serve nobody). Not with ExcludeTenants (ValidateTenantLists).
	Tenants []string
	// ExcludeTenants are tenants the fetch never serves; every other
	// tenant is walked as without a list, and an excluded one costs one
	// index descent, never a read of its attempts. At most MaxTenantList
	// distinct tenant ids; nil or empty: none.
	ExcludeTenants []string
}

// LeasedAttempt is one attempt a fetch leased, with its lease.
type LeasedAttempt struct {
	// Attempt is the attempt, now running under Lease.
	Attempt *kfstype.Attempt
	// Lease is the worker's lease on it, to heartbeat and record the
	// outcome with.
	Lease *Lease
	// TraceContext is the trace context the attempt's Start stored, when
	// FetchLeasesParams.TraceContexts asked for it; zero otherwise, or
	// when the attempt was started without one.
	TraceContext kfstype.TraceContext
}

// FetchLeasesResult is what one fetch leased.
type FetchLeasesResult struct {
	// Leased are the attempts now running, each with its lease, in id
	// order (UUIDv7: start order).
	Leased []*LeasedAttempt
	// Exhausted are due attempts that had no execution attempts left: the
	// fetch failed them (EXECUTION_ATTEMPTS_EXHAUSTED) instead.
	Exhausted []*kfstype.Attempt
	// NextAfterTenant is the AfterTenant for the next fetch: the last
	// tenant served, so the next fetch starts with the one after it; after
	// a fetch that leased nothing though it walked MaxTenants tenants, the
	// last tenant walked, so the next fetch looks further on (tenants with
	// nothing due, or with due rows this fetch may not take: excluded,
	// paused, out of tokens, at their caps, never hold the cursor in place).
	NextAfterTenant string
}

// FetchLeases is direct delivery's one transition: it picks up to
// BatchSize due outbox rows whose attempts wait for a delivery (the rows
// ClaimOutbox would claim), fairly across tenants, and moves each pair
// straight to running / leased for WorkerID, as AcquireLease would after a
// publication: one more execution attempt, a fresh random lease token, a
// deterministic queue_job_id ("pg:<outbox id>:<dispatch n>:<row version>",
// a redelivery's differs), and the outbox row due again at the lease's
// expiry, so a lost worker's attempt is fetched again then. Attempts with
// no execution attempts left are failed in the same statement. Rows other
// transactions hold are skipped, never waited on. The worker then
// heartbeats and records outcomes with the returned leases, exactly as
// after AcquireLease.
//
// The statement is prepared once per size class of the tables
// (plan_class.go), so a plan cached while the queue was empty is not used
// on a backlog; a fetch that follows one that leased nothing (and a
// Repo's first) reads the tables' size first, in a read-only statement
// of its own.
//
// Errors: *InputError.
func (r *Repo) FetchLeases(ctx context.Context, db DBTX, p *FetchLeasesParams) (*FetchLeasesResult, error) {
	v := r.call(ctx, db)
	if set(v, "FetchLeasesParams", p) {
		v.claim("WorkerID", p.WorkerID, p.BatchSize, "LeaseDuration", p.LeaseDuration)
		v.optionalText("AfterTenant", nonEmpty(p.AfterTenant), MaxTenantIDLength)
		if p.MaxTenants < 0 || p.MaxTenants > MaxFetchTenants {
			v.fail("MaxTenants", fmt.Sprintf("must be 0 (default) or 1..%d", MaxFetchTenants))
		}
		if p.PerTenant < 0 || p.PerTenant > MaxBatchSize {
			v.fail("PerTenant", fmt.Sprintf("must be 0 (default) or 1..%d", MaxBatchSize))
		}
		v.tenantLists(p.Tenants, p.ExcludeTenants)
	}
	if err := v.result(); err != nil {
		return nil, err
	}
	lease := cmp.Or(p.LeaseDuration, LeaseDurationDefault)
	class, err := r.fetchClass(ctx, db)
	if err != nil {
		return nil, fmt.Errorf("fetch leases for worker %q: read the tables' size: %w", p.WorkerID, mapError(err))
	}
	sent := time.Now()
	rows, err := r.q.FetchLeases(ctx, classed{db, class}, &gen.FetchLeasesParams{
		AsyncCommit: r.asyncProgress, Now: r.now(), WorkerID: p.WorkerID, LeaseDuration: lease,
		BatchSize: p.BatchSize, AfterTenant: p.AfterTenant,
		MaxTenants: cmp.Or(p.MaxTenants, FetchMaxTenantsDefault), PerTenant: cmp.Or(p.PerTenant, p.BatchSize),
		WithTraceContexts: p.TraceContexts, IncludeTenants: p.Tenants, ExcludeTenants: nilIfEmpty(p.ExcludeTenants),
	})
	if err != nil {
		return nil, fmt.Errorf("fetch leases for worker %q: %w", p.WorkerID, mapError(err))
	}
	res := &FetchLeasesResult{NextAfterTenant: p.AfterTenant}
	if len(rows) == 1 && rows[0].WalkEnd {
		// Nothing taken; the walk's end is the next fetch's start.
		res.NextAfterTenant = rows[0].TenantID
		rows = nil
	}
	r.fetched(rows)
	var leased []*gen.FetchLeasesRow
	for _, row := range rows {
		if row.Exhausted {
			res.Exhausted = append(res.Exhausted, attemptFromRow(fetchedRow(row)))
			continue
		}
		leased = append(leased, row)
	}
	// RETURNING has no order: hand leases out by id (UUIDv7: start order).
	sort.Slice(leased, func(i, j int) bool { return leased[i].ID.String() < leased[j].ID.String() })
	res.Leased = make([]*LeasedAttempt, len(leased))
	last := ""
	for i, row := range leased {
		a := attemptFromRow(fetchedRow(row))
		la := &LeasedAttempt{Attempt: a, Lease: &Lease{AttemptID: a.ID, WorkerID: *a.WorkerID, Token: *a.LeaseToken,
			ExpiresAt: *a.LeaseExpiresAt, LocalDeadline: r.localDeadline(sent, lease)}}
		if p.TraceContexts && row.TraceParent != nil && row.TraceState != nil {
			// Both set together: the table's columns are NOT NULL.
			la.TraceContext = kfstype.TraceContext{TraceParent: *row.TraceParent, TraceState: *row.TraceState}
		}
		res.Leased[i] = la
		if i == 0 || walkedBefore(p.AfterTenant, last, a.TenantID) {
			last = a.TenantID
		}
	}
	if last != "" {
		res.NextAfterTenant = last
	}
	return res, nil
}

// walkedBefore reports whether the walk that starts after after (in
// tenant_id order, wrapping) reaches x before y. Go's string order is
// bytewise, as is PostgreSQL's under the C collation; under another
// collation the next walk may start elsewhere, which costs fairness of one
// round, never correctness.
func walkedBefore(after, x, y string) bool {
	xWrapped, yWrapped := x <= after, y <= after
	if xWrapped != yWrapped {
		return !xWrapped
	}
	return x < y
}

// nilIfEmpty is s, or nil (SQL NULL: no list) when s is empty.
func nilIfEmpty(s []string) []string {
	if len(s) == 0 {
		return nil
	}
	return s
}

func nonEmpty(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

// fetchedRow is FetchLeases' row as the table's row type (the UNION of
// its two results loses sqlc's column types for run_state and checkpoint).
func fetchedRow(f *gen.FetchLeasesRow) *gen.DocumentCompilationAttempt {
	return &gen.DocumentCompilationAttempt{
		ID: f.ID, TenantID: f.TenantID, KnowledgeSpaceID: f.KnowledgeSpaceID, DocumentAssetID: f.DocumentAssetID,
		DocumentVersion: f.DocumentVersion, PublicationGenerationID: f.PublicationGenerationID,
		BaseHeadRevision: f.BaseHeadRevision, CandidatePublicationID: f.CandidatePublicationID,
		CandidateFingerprint: f.CandidateFingerprint, Checkpoint: kfstype.Checkpoint(f.Checkpoint),
		RunState: kfstype.RunState(f.RunState), ActiveSlot: f.ActiveSlot, ExecutionAttempts: f.ExecutionAttempts,
		MaxExecutionAttempts: f.MaxExecutionAttempts, QueueJobID: f.QueueJobID, ExternalJobID: f.ExternalJobID,
		WorkerID: f.WorkerID, LeaseToken: f.LeaseToken, LeaseExpiresAt: f.LeaseExpiresAt, HeartbeatAt: f.HeartbeatAt,
		RetryAt: f.RetryAt, LastErrorCode: f.LastErrorCode, LastErrorMessage: f.LastErrorMessage,
		RowVersion: f.RowVersion, CreatedAt: f.CreatedAt, UpdatedAt: f.UpdatedAt, StartedAt: f.StartedAt,
		CompletedAt: f.CompletedAt,
	}
}
