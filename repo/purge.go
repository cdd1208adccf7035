package repo

// Retention, the Go twin of db/queries/purge.sql and in its order: Purge
// deletes a tenant's old terminal attempts, PurgeTenants pages through the
// tenants that have some.

import (
	"cmp"
	"context"
	"fmt"
	"time"

	"github.com/knowledgefs/kfsdb/db/gen"
)

// PurgeBatchSizeDefault is PurgeParams.BatchSize when zero; MaxPurgeBatch
// bounds it.
const (
	PurgeBatchSizeDefault = 1000
	MaxPurgeBatch         = 10000
)

// PurgeParams selects terminal attempts to delete.
type PurgeParams struct {
	// TenantID is the tenant whose attempts go, 1..255 characters.
	TenantID string
	// CompletedBefore is the retention cut-off: attempts completed strictly
	// before it go.
	CompletedBefore time.Time
	// BatchSize bounds one call (1..MaxPurgeBatch). Defaults to
	// PurgeBatchSizeDefault.
	BatchSize int32
}

// Purge deletes up to BatchSize terminal attempts of one tenant completed
// before the cut-off, oldest first, skipping rows another transaction
// holds; their outbox rows go by cascade. Call it until it returns fewer
// than BatchSize.
//
// Errors: *InputError.
func (r *Repo) Purge(ctx context.Context, db DBTX, p *PurgeParams) (int, error) {
	v := r.call(ctx, db)
	if set(v, "PurgeParams", p) {
		v.text("TenantID", p.TenantID, MaxTenantIDLength)
		if p.CompletedBefore.IsZero() {
			v.fail("CompletedBefore", "must be set")
		}
		v.timestamp("CompletedBefore", p.CompletedBefore)
		if p.BatchSize < 0 || p.BatchSize > MaxPurgeBatch {
			v.fail("BatchSize", "must be 1.."+fmt.Sprint(MaxPurgeBatch)+" (or 0 for the default)")
		}
	}
	if err := v.result(); err != nil {
		return 0, err
	}
	batch := p.BatchSize
	if batch == 0 {
		batch = PurgeBatchSizeDefault
	}
	ids, err := r.q.Purge(ctx, customPlanned{db}, &gen.PurgeParams{TenantID: p.TenantID, CompletedBefore: p.CompletedBefore, BatchSize: batch})
	if err != nil {
		return 0, fmt.Errorf("purge attempts of tenant %q: %w", p.TenantID, mapError(err))
	}
	return len(ids), nil
}

// PurgeTenantsLimitDefault is PurgeTenantsParams.Limit when zero;
// MaxPurgeTenants bounds it.
const (
	PurgeTenantsLimitDefault = 1000
	MaxPurgeTenants          = 10000
)

// PurgeTenantsParams selects a page of the tenants an all-tenants purge
// walks.
type PurgeTenantsParams struct {
	// CompletedBefore is the retention cut-off, as PurgeParams': only
	// tenants with a terminal attempt completed strictly before it are
	// listed.
	CompletedBefore time.Time
	// AfterTenant is where the page starts: the first tenant after it in
	// tenant_id order. Pass the previous page's last tenant to go on.
	// Defaults to "": from the first tenant.
	AfterTenant string
	// Limit (1..MaxPurgeTenants) bounds the page. Defaults to
	// PurgeTenantsLimitDefault.
	Limit int32
}

// PurgeTenants lists, in tenant_id order, the tenants with terminal
// attempts completed before the cut-off: the tenants to call Purge for
// when retention applies to every tenant. Its cost grows with the number
// of tenants, not with the history (two index probes per tenant). A page
// shorter than Limit is the last.
//
// Errors: *InputError.
func (r *Repo) PurgeTenants(ctx context.Context, db DBTX, p *PurgeTenantsParams) ([]string, error) {
	v := r.call(ctx, db)
	if set(v, "PurgeTenantsParams", p) {
		if p.CompletedBefore.IsZero() {
			v.fail("CompletedBefore", "must be set")
		}
		v.timestamp("CompletedBefore", p.CompletedBefore)
		v.optionalText("AfterTenant", nonEmpty(p.AfterTenant), MaxTenantIDLength)
		if p.Limit < 0 || p.Limit > MaxPurgeTenants {
			v.fail("Limit", fmt.Sprintf("must be 0 (default) or 1..%d", MaxPurgeTenants))
		}
	}
	if err := v.result(); err != nil {
		return nil, err
	}
	tenants, err := r.q.PurgeTenants(ctx, db, &gen.PurgeTenantsParams{AfterTenant: p.AfterTenant,
		CompletedBefore: p.CompletedBefore, RowLimit: cmp.Or(p.Limit, PurgeTenantsLimitDefault)})
	if err != nil {
		return nil, fmt.Errorf("list the tenants to purge: %w", mapError(err))
	}
	return tenants, nil
}
