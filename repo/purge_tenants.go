package repo

import (
	"cmp"
	"context"
	"fmt"
	"time"

	"github.com/knowledgefs/kfsdb/db/gen"
)

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
