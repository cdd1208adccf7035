package repo

// ListStuck, the operator read of db/queries/operator.sql that reports
// stuck attempts, with the reasons it reports them for (StuckReason); the
// other operator reads are in operator.go.

import (
	"context"
	"fmt"
	"time"

	"github.com/knowledgefs/kfsdb/db/gen"
	"github.com/knowledgefs/kfsdb/kfstype"
)

// StuckReason says why ListStuck reports an attempt.
type StuckReason string

const (
	// StuckLeaseExpired: running, and its lease expired without a
	// heartbeat (a lost worker); the relay or a direct worker should
	// take it again.
	StuckLeaseExpired StuckReason = "lease_expired"
	// StuckRelayLockExpired: its outbox row is dispatching past the relay's
	// lock (a relay died between claim and mark).
	StuckRelayLockExpired StuckReason = "relay_lock_expired"
	// StuckVisibilityExpired: published (queued / dispatched) and no
	// worker took it before the visibility deadline.
	StuckVisibilityExpired StuckReason = "visibility_expired"
	// StuckPendingOverdue: waiting for publication for longer than
	// ListStuckParams.PendingOverdue (no relay or direct worker is taking
	// rows).
	StuckPendingOverdue StuckReason = "pending_overdue"
	// StuckDeadNotTerminal: its outbox row is dead while the attempt is
	// live, a pairing the transitions never write.
	StuckDeadNotTerminal StuckReason = "dead_not_terminal"
)

// StuckReasons returns every stuck reason.
func StuckReasons() []StuckReason {
	return []StuckReason{StuckLeaseExpired, StuckRelayLockExpired, StuckVisibilityExpired, StuckPendingOverdue, StuckDeadNotTerminal}
}

// Description is the reason in words, for an operator.
func (s StuckReason) Description() string {
	switch s {
	case StuckLeaseExpired:
		return "running, but the worker's lease expired without a heartbeat"
	case StuckRelayLockExpired:
		return "the relay claimed the outbox row and its lock expired before it was published"
	case StuckVisibilityExpired:
		return "published, but no worker took it before the visibility deadline"
	case StuckPendingOverdue:
		return "waiting for publication for longer than the overdue threshold"
	case StuckDeadNotTerminal:
		return "the outbox row is dead but the attempt is still live"
	}
	return "unknown reason " + string(s)
}

// ListStuckParams selects ListStuck's scope.
type ListStuckParams struct {
	// TenantID is the tenant looked at (1..255 characters); it must be
	// empty when AllTenants is set.
	TenantID string
	// AllTenants looks at every tenant. Defaults to false.
	AllTenants bool
	// PendingOverdue is how long a pending row may be due before it is
	// reported. Defaults to PendingOverdueDefault.
	PendingOverdue time.Duration
	// Limit bounds the rows returned, 1..MaxListLimit.
	Limit int32
}

// StuckAttempt is an attempt that should have moved on and has not.
type StuckAttempt struct {
	// Reason is why it is reported.
	Reason StuckReason
	// Since is when it became stuck: the lease's expiry, the relay lock's
	// expiry, the visibility deadline, when it became due, or when the
	// outbox row was last written (dead_not_terminal).
	Since time.Time
	// Attempt is the attempt as read.
	Attempt *kfstype.Attempt
	// Outbox is its outbox row as read.
	Outbox *kfstype.OutboxMessage
}

// ListStuck lists stuck attempts, longest stuck first, at most Limit; an
// attempt stuck for two reasons is listed once per reason. Each reason is
// read off the head of an index (see StuckReason's constants), so the
// cost grows with the number of stuck rows, not with the history.
//
// Errors: *InputError.
func (r *Repo) ListStuck(ctx context.Context, db DBTX, p *ListStuckParams) ([]*StuckAttempt, error) {
	v := r.call(ctx, db)
	if set(v, "ListStuckParams", p) {
		v.tenantScope(p.TenantID, p.AllTenants)
		if p.PendingOverdue != 0 {
			v.duration("PendingOverdue", p.PendingOverdue)
		}
		v.between("Limit", p.Limit, 1, MaxListLimit)
	}
	if err := v.result(); err != nil {
		return nil, err
	}
	overdue := p.PendingOverdue
	if overdue == 0 {
		overdue = PendingOverdueDefault
	}
	rows, err := r.q.ListStuck(ctx, customPlanned{db}, &gen.ListStuckParams{
		Now: r.now(), RowLimit: p.Limit, AllTenants: p.AllTenants, TenantID: p.TenantID, PendingOverdue: overdue,
	})
	if err != nil {
		return nil, fmt.Errorf("list stuck attempts: %w", mapError(err))
	}
	out := make([]*StuckAttempt, len(rows))
	for i, row := range rows {
		out[i] = &StuckAttempt{
			Reason: StuckReason(row.Reason), Since: row.Since.UTC(),
			Attempt: attemptFromRow(&row.DocumentCompilationAttempt), Outbox: outboxFromRow(&row.DocumentCompilationOutbox),
		}
	}
	return out, nil
}
