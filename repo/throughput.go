package repo

import (
	"context"
	"fmt"
	"time"

	"github.com/knowledgefs/kfsdb/db/gen"
)

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
	Minute     time.Time
	Succeeded  int64
	Failed     int64
	Canceled   int64
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
	rows, err := r.q.AttemptThroughputByMinute(ctx, db, &gen.AttemptThroughputByMinuteParams{
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
