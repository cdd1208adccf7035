package repo

// Direct delivery's per-tenant caps, the Go twin of
// db/queries/tenant_limits.sql and in its order: SetTenantLimit,
// RemoveTenantLimit and ListTenantLimits.

import (
	"context"
	"fmt"

	"github.com/knowledgefs/kfsdb/db/gen"
)

// SetTenantLimitParams caps a tenant's running attempts under direct
// delivery (FetchLeases): no fetch, in any process, leases an attempt of
// the tenant while MaxRunning of its leases are live. Leases taken through
// the relay path (AcquireLease) count towards the cap but are not held
// back by it.
type SetTenantLimitParams struct {
	// TenantID is 1..255 characters.
	TenantID string
	// MaxRunning is > 0.
	MaxRunning int32
}

// SetTenantLimit caps a tenant, or changes its cap.
//
// Errors: *InputError.
func (r *Repo) SetTenantLimit(ctx context.Context, db DBTX, p *SetTenantLimitParams) error {
	v := r.call(ctx, db)
	if set(v, "SetTenantLimitParams", p) {
		v.text("TenantID", p.TenantID, MaxTenantIDLength)
		v.positive("MaxRunning", p.MaxRunning)
	}
	if err := v.result(); err != nil {
		return err
	}
	if _, err := r.q.SetTenantLimit(ctx, db, &gen.SetTenantLimitParams{TenantID: p.TenantID, MaxRunning: p.MaxRunning, Now: r.now()}); err != nil {
		return fmt.Errorf("set the limit of tenant %q: %w", p.TenantID, mapError(err))
	}
	return nil
}

// RemoveTenantLimitParams names the tenant whose cap is lifted.
type RemoveTenantLimitParams struct {
	// TenantID is 1..255 characters.
	TenantID string
}

// RemoveTenantLimit lifts a tenant's cap.
//
// Errors: *InputError, ErrNotFound (the tenant has no cap).
func (r *Repo) RemoveTenantLimit(ctx context.Context, db DBTX, p *RemoveTenantLimitParams) error {
	v := r.call(ctx, db)
	if set(v, "RemoveTenantLimitParams", p) {
		v.text("TenantID", p.TenantID, MaxTenantIDLength)
	}
	if err := v.result(); err != nil {
		return err
	}
	n, err := r.q.RemoveTenantLimit(ctx, db, p.TenantID)
	switch {
	case err != nil:
		return fmt.Errorf("remove the limit of tenant %q: %w", p.TenantID, mapError(err))
	case n == 0:
		return fmt.Errorf("remove the limit of tenant %q: %w", p.TenantID, ErrNotFound)
	}
	return nil
}

// ListTenantLimitsParams selects the caps ListTenantLimits returns: all of
// them, as it has no fields yet. It keeps the method's shape, and room for
// paging.
type ListTenantLimitsParams struct{}

// TenantLimit is one tenant's cap, as ListTenantLimits returns it.
type TenantLimit struct {
	// TenantID is the capped tenant.
	TenantID string
	// MaxRunning is the most live leases FetchLeases lets the tenant hold.
	MaxRunning int32
}

// ListTenantLimits lists every tenant's cap, by tenant id.
//
// Errors: *InputError (a nil ctx, db or params).
func (r *Repo) ListTenantLimits(ctx context.Context, db DBTX, p *ListTenantLimitsParams) ([]TenantLimit, error) {
	v := r.call(ctx, db)
	set(v, "ListTenantLimitsParams", p)
	if err := v.result(); err != nil {
		return nil, err
	}
	rows, err := r.q.ListTenantLimits(ctx, db)
	if err != nil {
		return nil, fmt.Errorf("list tenant limits: %w", mapError(err))
	}
	out := make([]TenantLimit, len(rows))
	for i, row := range rows {
		out[i] = TenantLimit{TenantID: row.TenantID, MaxRunning: row.MaxRunning}
	}
	return out, nil
}
