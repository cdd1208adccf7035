package repo

// Direct delivery's per-tenant limits, the Go twin of
// db/queries/tenant_limits.sql: caps (SetTenantLimit, RemoveTenantLimit),
// rates (SetTenantRate, RemoveTenantRate), pauses (PauseTenant,
// ResumeTenant), and what is set (ListTenantLimits, GetTenantLimit).
// FetchLeases holds every one of them across processes (migrations 0008
// and 0011 say how).

import (
	"context"
	"fmt"
	"math"
	"strconv"
	"time"

	"github.com/knowledgefs/kfsdb/db/gen"
)

// Bounds of a tenant's rate limit (SetTenantRateParams), checked before
// any round trip.
const (
	// MaxTenantRate bounds SetTenantRateParams.Rate, in leases per second.
	MaxTenantRate = 1_000_000
	// MaxTenantBurst bounds SetTenantRateParams.Burst.
	MaxTenantBurst = 1_000_000
	// MaxPauseReasonLength bounds PauseTenantParams.Reason, in characters
	// (migration 0011's check).
	MaxPauseReasonLength = 1024
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

// SetTenantLimit caps a tenant, or changes its cap. Its rate and pause, if
// any, stay.
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

// RemoveTenantLimit lifts a tenant's cap. Its rate and pause, if any,
// stay.
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
	return r.liftTenantLimit(ctx, db, p.TenantID, "cap", "remove the limit")
}

// SetTenantRateParams limits how fast a tenant's attempts are leased
// under direct delivery (FetchLeases), across every process: a token
// bucket of Burst tokens, refilled at Rate per second by the database
// clock, one token per lease. Over any t seconds the tenant gets at most
// Rate*t + Burst leases from all fetches together (those that start after
// SetTenantRate returns). Attempts leased through the relay path
// (AcquireLease) are not limited and spend no token.
type SetTenantRateParams struct {
	// TenantID is 1..255 characters.
	TenantID string
	// Rate is the leases per second, > 0 and at most MaxTenantRate (0.5:
	// one lease every two seconds).
	Rate float64
	// Burst is the most leases at once after a quiet spell (the bucket's
	// size), 1..MaxTenantBurst.
	Burst int32
}

// SetTenantRate limits a tenant's rate of leases, or changes its limit. A
// new bucket starts full (Burst tokens); a changed one keeps its tokens,
// refilled to now at the old rate, up to the new Burst. Its cap and
// pause, if any, stay.
//
// Errors: *InputError.
func (r *Repo) SetTenantRate(ctx context.Context, db DBTX, p *SetTenantRateParams) error {
	v := r.call(ctx, db)
	if set(v, "SetTenantRateParams", p) {
		v.text("TenantID", p.TenantID, MaxTenantIDLength)
		v.rate("Rate", p.Rate)
		if p.Burst < 1 || p.Burst > MaxTenantBurst {
			v.fail("Burst", fmt.Sprintf("must be 1..%d", MaxTenantBurst))
		}
	}
	if err := v.result(); err != nil {
		return err
	}
	if err := r.q.SetTenantRate(ctx, db, &gen.SetTenantRateParams{TenantID: p.TenantID, LeasesPerSecond: p.Rate, Burst: p.Burst, Now: r.now()}); err != nil {
		return fmt.Errorf("set the rate of tenant %q: %w", p.TenantID, mapError(err))
	}
	return nil
}

// rate checks a rate of leases per second: finite, > 0, at most
// MaxTenantRate.
func (v *validator) rate(field string, x float64) {
	if math.IsNaN(x) || math.IsInf(x, 0) || x <= 0 || x > MaxTenantRate {
		v.fail(field, "must be a number of leases per second greater than 0 and at most "+strconv.Itoa(MaxTenantRate))
	}
}

// RemoveTenantRateParams names the tenant whose rate limit is lifted.
type RemoveTenantRateParams struct {
	// TenantID is 1..255 characters.
	TenantID string
}

// RemoveTenantRate lifts a tenant's rate limit. Its cap and pause, if
// any, stay.
//
// Errors: *InputError, ErrNotFound (the tenant has no rate limit).
func (r *Repo) RemoveTenantRate(ctx context.Context, db DBTX, p *RemoveTenantRateParams) error {
	v := r.call(ctx, db)
	if set(v, "RemoveTenantRateParams", p) {
		v.text("TenantID", p.TenantID, MaxTenantIDLength)
	}
	if err := v.result(); err != nil {
		return err
	}
	return r.liftTenantLimit(ctx, db, p.TenantID, "rate", "remove the rate")
}

// PauseTenantParams names the tenant to pause.
type PauseTenantParams struct {
	// TenantID is 1..255 characters.
	TenantID string
	// Reason is why, for whoever looks (ListTenantLimits,
	// GetTenantLimit): cut to MaxPauseReasonLength characters and cleaned
	// as TruncateMessage does. Defaults to nil (or ""): none.
	Reason *string
}

// PauseTenantResult says what PauseTenant did.
type PauseTenantResult struct {
	// AlreadyPaused is true when the tenant was paused before the call,
	// which then changed nothing (the first pause's time and reason stay).
	AlreadyPaused bool
}

// PauseTenant pauses a tenant under direct delivery: from the call's
// commit on, no fetch in any process leases its attempts (nor fails its
// exhausted ones) until ResumeTenant. Its attempts and outbox rows are not
// touched: they stay due, and are leased, in their order, once it is
// resumed. Leases it holds already run on. Attempts leased through the
// relay path (AcquireLease) are not held back.
//
// Errors: *InputError.
func (r *Repo) PauseTenant(ctx context.Context, db DBTX, p *PauseTenantParams) (*PauseTenantResult, error) {
	v := r.call(ctx, db)
	if set(v, "PauseTenantParams", p) {
		v.text("TenantID", p.TenantID, MaxTenantIDLength)
	}
	if err := v.result(); err != nil {
		return nil, err
	}
	var reason *string
	if p.Reason != nil && *p.Reason != "" {
		cut := truncateText(*p.Reason, MaxPauseReasonLength)
		reason = &cut
	}
	rows, err := r.q.PauseTenant(ctx, db, &gen.PauseTenantParams{TenantID: p.TenantID, Now: r.now(), Reason: reason})
	if err != nil {
		return nil, fmt.Errorf("pause tenant %q: %w", p.TenantID, mapError(err))
	}
	return &PauseTenantResult{AlreadyPaused: len(rows) == 0}, nil
}

// ResumeTenantParams names the tenant to resume.
type ResumeTenantParams struct {
	// TenantID is 1..255 characters.
	TenantID string
}

// ResumeTenant ends a tenant's pause: fetches lease its due attempts
// again, within its cap and rate if it has them. Idle sources are woken
// at the commit.
//
// Errors: *InputError, ErrNotFound (the tenant is not paused).
func (r *Repo) ResumeTenant(ctx context.Context, db DBTX, p *ResumeTenantParams) error {
	v := r.call(ctx, db)
	if set(v, "ResumeTenantParams", p) {
		v.text("TenantID", p.TenantID, MaxTenantIDLength)
	}
	if err := v.result(); err != nil {
		return err
	}
	return r.liftTenantLimit(ctx, db, p.TenantID, "pause", "resume")
}

// liftTenantLimit lifts one limit of tenant (kind: cap, rate or pause),
// deleting its row when nothing else is limited; ErrNotFound when it had
// no such limit. verb says what the caller does, for the error.
func (r *Repo) liftTenantLimit(ctx context.Context, db DBTX, tenant, kind, verb string) error {
	row, err := r.q.LiftTenantLimit(ctx, db, &gen.LiftTenantLimitParams{LimitKind: kind, TenantID: tenant, Now: r.now()})
	switch {
	case err != nil:
		return fmt.Errorf("%s of tenant %q: %w", verb, tenant, mapError(err))
	case row.Lifted == 0:
		return fmt.Errorf("%s of tenant %q: %w", verb, tenant, ErrNotFound)
	}
	return nil
}

// ListTenantLimitsParams selects the limits ListTenantLimits returns: all
// of them, as it has no fields yet. It keeps the method's shape, and room
// for paging.
type ListTenantLimitsParams struct{}

// TenantLimit is one tenant's limits, as ListTenantLimits and
// GetTenantLimit return them. A tenant without one is not limited.
type TenantLimit struct {
	// TenantID is the limited tenant.
	TenantID string
	// MaxRunning is the most live leases FetchLeases lets the tenant hold;
	// 0 when it has no cap.
	MaxRunning int32
	// Rate is the tenant's leases per second; 0 when it has no rate limit.
	Rate float64
	// Burst is the size of its bucket; 0 without a rate limit.
	Burst int32
	// Tokens is what its bucket holds now (by the database clock): the
	// leases a fetch could take at once; 0 without a rate limit.
	Tokens float64
	// PausedAt is when it was paused (the database clock); nil when it is
	// not.
	PausedAt *time.Time
	// PauseReason is the reason given to PauseTenant; "" when none was.
	PauseReason string
}

// Paused reports whether the tenant is paused.
func (l TenantLimit) Paused() bool { return l.PausedAt != nil }

// ListTenantLimits lists every tenant's limits, by tenant id.
//
// Errors: *InputError (a nil ctx, db or params).
func (r *Repo) ListTenantLimits(ctx context.Context, db DBTX, p *ListTenantLimitsParams) ([]TenantLimit, error) {
	v := r.call(ctx, db)
	set(v, "ListTenantLimitsParams", p)
	if err := v.result(); err != nil {
		return nil, err
	}
	rows, err := r.q.ListTenantLimits(ctx, db, &gen.ListTenantLimitsParams{Now: r.now()})
	if err != nil {
		return nil, fmt.Errorf("list tenant limits: %w", mapError(err))
	}
	out := make([]TenantLimit, len(rows))
	for i, row := range rows {
		out[i] = tenantLimit(row)
	}
	return out, nil
}

// GetTenantLimitParams names the tenant whose limits GetTenantLimit reads.
type GetTenantLimitParams struct {
	// TenantID is 1..255 characters.
	TenantID string
}

// GetTenantLimit reads one tenant's limits.
//
// Errors: *InputError, ErrNotFound (the tenant is not limited).
func (r *Repo) GetTenantLimit(ctx context.Context, db DBTX, p *GetTenantLimitParams) (*TenantLimit, error) {
	v := r.call(ctx, db)
	if set(v, "GetTenantLimitParams", p) {
		v.text("TenantID", p.TenantID, MaxTenantIDLength)
	}
	if err := v.result(); err != nil {
		return nil, err
	}
	rows, err := r.q.ListTenantLimits(ctx, db, &gen.ListTenantLimitsParams{Now: r.now(), TenantID: &p.TenantID})
	switch {
	case err != nil:
		return nil, fmt.Errorf("get the limits of tenant %q: %w", p.TenantID, mapError(err))
	case len(rows) == 0:
		return nil, fmt.Errorf("get the limits of tenant %q: %w", p.TenantID, ErrNotFound)
	}
	l := tenantLimit(rows[0])
	return &l, nil
}

// tenantLimit is a limits row as the API shows it: a limit the tenant has
// not is zero.
func tenantLimit(row *gen.ListTenantLimitsRow) TenantLimit {
	l := TenantLimit{TenantID: row.TenantID, Tokens: row.Tokens, PausedAt: row.PausedAt}
	if row.MaxRunning != nil {
		l.MaxRunning = *row.MaxRunning
	}
	if row.LeasesPerSecond != nil {
		l.Rate = *row.LeasesPerSecond
	}
	if row.Burst != nil {
		l.Burst = *row.Burst
	}
	if row.PauseReason != nil {
		l.PauseReason = *row.PauseReason
	}
	return l
}

// CountTenantLimitsParams selects what CountTenantLimits counts: every
// tenant's limits, as it has no fields yet.
type CountTenantLimitsParams struct{}

// TenantLimitCounts are how many tenants have each limit; a tenant with
// several is counted under each.
type TenantLimitCounts struct {
	// Capped tenants have a cap on running attempts.
	Capped int64
	// RateLimited tenants have a rate limit.
	RateLimited int64
	// Paused tenants are paused.
	Paused int64
}

// CountTenantLimits counts the tenants with each limit, for metrics.
//
// Errors: *InputError (a nil ctx, db or params).
func (r *Repo) CountTenantLimits(ctx context.Context, db DBTX, p *CountTenantLimitsParams) (*TenantLimitCounts, error) {
	v := r.call(ctx, db)
	set(v, "CountTenantLimitsParams", p)
	if err := v.result(); err != nil {
		return nil, err
	}
	row, err := r.q.CountTenantLimits(ctx, db)
	if err != nil {
		return nil, fmt.Errorf("count tenant limits: %w", mapError(err))
	}
	return &TenantLimitCounts{Capped: row.Capped, RateLimited: row.RateLimited, Paused: row.Paused}, nil
}
