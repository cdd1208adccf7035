package repo

import (
	"context"
	"fmt"

	"github.com/knowledgefs/kfsdb/db/gen"
)

// TenantLimit caps a tenant's running attempts under direct delivery
// (FetchLeases): no fetch, in any process, leases an attempt of the
// tenant while MaxRunning of its leases are live. Leases taken through
// the relay path (AcquireLease) count towards the cap but are not held
// back by it.
type TenantLimit struct {
	// TenantID is 1..255 characters.
	TenantID string
	// MaxRunning is > 0.
	MaxRunning int32
}

func (l *TenantLimit) validate(v *validator) {
	if !set(v, "TenantLimit", l) {
		return
	}
	v.text("TenantID", l.TenantID, MaxTenantIDLength)
	v.positive("MaxRunning", l.MaxRunning)
}

// SetTenantLimit caps a tenant, or changes its cap.
//
// Errors: *InputError.
func (r *Repo) SetTenantLimit(ctx context.Context, db DBTX, l *TenantLimit) error {
	v := r.call(ctx, db)
	l.validate(v)
	if err := v.result(); err != nil {
		return err
	}
	if _, err := r.q.TenantLimitSet(ctx, db, &gen.TenantLimitSetParams{TenantID: l.TenantID, MaxRunning: l.MaxRunning, Now: r.now()}); err != nil {
		return fmt.Errorf("set the limit of tenant %q: %w", l.TenantID, mapError(err))
	}
	return nil
}

// RemoveTenantLimit lifts a tenant's cap.
//
// Errors: *InputError, ErrNotFound (the tenant has no cap).
func (r *Repo) RemoveTenantLimit(ctx context.Context, db DBTX, tenantID string) error {
	v := r.call(ctx, db)
	v.text("TenantID", tenantID, MaxTenantIDLength)
	if err := v.result(); err != nil {
		return err
	}
	n, err := r.q.TenantLimitDelete(ctx, db, tenantID)
	switch {
	case err != nil:
		return fmt.Errorf("remove the limit of tenant %q: %w", tenantID, mapError(err))
	case n == 0:
		return fmt.Errorf("remove the limit of tenant %q: %w", tenantID, ErrNotFound)
	}
	return nil
}

// TenantLimits lists every tenant's cap, by tenant id.
//
// Errors: *InputError (a nil ctx or db).
func (r *Repo) TenantLimits(ctx context.Context, db DBTX) ([]TenantLimit, error) {
	v := r.call(ctx, db)
	if err := v.result(); err != nil {
		return nil, err
	}
	rows, err := r.q.TenantLimitList(ctx, db)
	if err != nil {
		return nil, fmt.Errorf("list tenant limits: %w", mapError(err))
	}
	out := make([]TenantLimit, len(rows))
	for i, row := range rows {
		out[i] = TenantLimit{TenantID: row.TenantID, MaxRunning: row.MaxRunning}
	}
	return out, nil
}
