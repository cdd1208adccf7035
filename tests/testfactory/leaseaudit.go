package testfactory

import (
	"context"
	"fmt"
	"sort"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/knowledgefs/kfsdb/kfstype"
)

// InstallLeaseAudit adds a trigger to a test database that records, in
// table test_lease_audit, every update of an attempt that changes its lease
// token or is made while it holds one, with the statement clock of the
// change (updated_at) and the lease expiry the row had before it. Lease
// validity and fencing are then read from the database itself rather than
// from the runtime's view of it: see [ReadLeaseIntervals],
// [RequireNoOverlap] and [RequireFencedWrites].
func InstallLeaseAudit(ctx context.Context, t testing.TB, db DBTX) {
	t.Helper()
	_, err := db.Exec(ctx, `
		CREATE TABLE test_lease_audit (
		  seq            bigserial PRIMARY KEY,
		  attempt_id     uuid NOT NULL,
		  old_token      uuid,
		  old_worker     text,
		  old_expires    timestamptz,
		  old_state      text NOT NULL,
		  old_checkpoint text NOT NULL,
		  old_job        text,
		  new_token      uuid,
		  new_worker     text,
		  new_expires    timestamptz,
		  new_state      text NOT NULL,
		  new_checkpoint text NOT NULL,
		  new_job        text,
		  new_error_code text,
		  changed_at     timestamptz NOT NULL
		);
		CREATE FUNCTION test_lease_audit_fn() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN
		  INSERT INTO test_lease_audit (attempt_id, old_token, old_worker, old_expires, old_state, old_checkpoint, old_job,
		                                new_token, new_worker, new_expires, new_state, new_checkpoint, new_job, new_error_code, changed_at)
		  VALUES (NEW.id, OLD.lease_token, OLD.worker_id, OLD.lease_expires_at, OLD.run_state, OLD.checkpoint, OLD.queue_job_id,
		          NEW.lease_token, NEW.worker_id, NEW.lease_expires_at, NEW.run_state, NEW.checkpoint, NEW.queue_job_id,
		          NEW.last_error_code, NEW.updated_at);
		  RETURN NULL;
		END $$;
		CREATE TRIGGER test_lease_audit_tg AFTER UPDATE ON document_compilation_attempts
		  FOR EACH ROW WHEN (OLD.lease_token IS DISTINCT FROM NEW.lease_token OR OLD.lease_token IS NOT NULL)
		  EXECUTE FUNCTION test_lease_audit_fn();`)
	require.NoError(t, err)
}

// LeaseInterval is one lease token's validity.
type LeaseInterval struct {
	AttemptID uuid.UUID
	Token     uuid.UUID
	Worker    string
	Acquired  time.Time
	// End is when the token stopped being valid: the write that ended or
	// replaced it, or its expiry if that came first. Zero while still held.
	End time.Time
}

// leaseAuditRow is one row of test_lease_audit.
type leaseAuditRow struct {
	attempt                      uuid.UUID
	oldToken, newToken           *uuid.UUID
	oldWorker, newWorker         *string
	oldExpires, newExpires       *time.Time
	oldState, newState           string
	oldCheckpoint, newCheckpoint string
	oldJob, newJob, newErrorCode *string
	at                           time.Time
}

func readLeaseAudit(ctx context.Context, t testing.TB, db DBTX) []leaseAuditRow {
	t.Helper()
	rows, err := db.Query(ctx, `
		SELECT attempt_id, old_token, new_token, old_worker, new_worker, old_expires, new_expires,
		       old_state, new_state, old_checkpoint, new_checkpoint, old_job, new_job, new_error_code, changed_at
		  FROM test_lease_audit ORDER BY seq`)
	require.NoError(t, err)
	defer rows.Close()
	var out []leaseAuditRow
	for rows.Next() {
		var r leaseAuditRow
		require.NoError(t, rows.Scan(&r.attempt, &r.oldToken, &r.newToken, &r.oldWorker, &r.newWorker, &r.oldExpires, &r.newExpires,
			&r.oldState, &r.newState, &r.oldCheckpoint, &r.newCheckpoint, &r.oldJob, &r.newJob, &r.newErrorCode, &r.at))
		out = append(out, r)
	}
	require.NoError(t, rows.Err())
	return out
}

// ReadLeaseIntervals rebuilds every lease interval, by attempt, from the
// audit table of [InstallLeaseAudit].
func ReadLeaseIntervals(ctx context.Context, t testing.TB, db DBTX) map[uuid.UUID][]LeaseInterval {
	t.Helper()
	open := map[uuid.UUID]*LeaseInterval{}
	out := map[uuid.UUID][]LeaseInterval{}
	for _, r := range readLeaseAudit(ctx, t, db) {
		if sameToken(r.oldToken, r.newToken) {
			continue // a write under the lease, not a change of it
		}
		if r.oldToken != nil {
			iv := open[*r.oldToken]
			require.NotNil(t, iv, "lease %s ended without having been acquired", *r.oldToken)
			iv.End = r.at
			if r.oldExpires.Before(r.at) {
				iv.End = *r.oldExpires
			}
			out[r.attempt] = append(out[r.attempt], *iv)
			delete(open, *r.oldToken)
		}
		if r.newToken != nil {
			open[*r.newToken] = &LeaseInterval{AttemptID: r.attempt, Token: *r.newToken, Worker: *r.newWorker, Acquired: r.at}
		}
	}
	for _, iv := range open {
		out[iv.AttemptID] = append(out[iv.AttemptID], *iv)
	}
	return out
}

func sameToken(a, b *uuid.UUID) bool {
	return a != nil && b != nil && *a == *b
}

// RequireNoOverlap requires that an attempt's lease intervals are disjoint:
// no token was granted while another was still valid.
func RequireNoOverlap(t testing.TB, ivs []LeaseInterval) {
	t.Helper()
	if o := Overlaps(ivs); len(o) > 0 {
		require.FailNow(t, o[0])
	}
}

// Overlaps describes each pair of an attempt's consecutive lease intervals
// that overlap (a token granted while the previous one was still valid or
// still held); none for disjoint intervals.
func Overlaps(ivs []LeaseInterval) []string {
	sorted := append([]LeaseInterval(nil), ivs...)
	sort.Slice(sorted, func(i, j int) bool { return sorted[i].Acquired.Before(sorted[j].Acquired) })
	var out []string
	for i := 1; i < len(sorted); i++ {
		prev, cur := sorted[i-1], sorted[i]
		switch {
		case prev.End.IsZero():
			out = append(out, fmt.Sprintf("attempt %s: lease %s (%s) still held when %s (%s) was granted",
				cur.AttemptID, prev.Token, prev.Worker, cur.Token, cur.Worker))
		case cur.Acquired.Before(prev.End):
			out = append(out, fmt.Sprintf("attempt %s: lease %s of %s valid until %s overlaps lease %s of %s acquired at %s",
				cur.AttemptID, prev.Token, prev.Worker, prev.End, cur.Token, cur.Worker, cur.Acquired))
		}
	}
	return out
}

// RequireNoLeaseOverlap reads every lease interval and requires that no
// attempt ever had two valid leases at once. It returns the number of
// leases granted.
func RequireNoLeaseOverlap(ctx context.Context, t testing.TB, db DBTX) int {
	t.Helper()
	n := 0
	for _, ivs := range ReadLeaseIntervals(ctx, t, db) {
		RequireNoOverlap(t, ivs)
		n += len(ivs)
	}
	return n
}

// FencedWrites counts the writes made under a lease.
type FencedWrites struct {
	// Heartbeats and Advances kept the token (a heartbeat moves the
	// expiry, an advance the checkpoint or nothing but row_version).
	KeptToken int
	// Outcomes ended the lease: Complete, ScheduleRetry, a worker's Fail.
	Outcomes int
}

// RequireFencedWrites requires that every write a worker made under a
// lease (Heartbeat, Advance, Complete, ScheduleRetry, Fail) happened while
// that lease was valid by the database's clock: strictly before the
// expiry the row held. A handler that lost its lease and wrote anyway would
// show up here. Writes that end a lease without holding it (Cancel,
// Supersede, FailExhausted, a relay's dead-letter, a takeover by
// AcquireLease) and MarkDispatched of an expired running attempt are not
// lease-fenced and are skipped.
func RequireFencedWrites(ctx context.Context, t testing.TB, db DBTX) FencedWrites {
	t.Helper()
	fw, late := CheckFencedWrites(ctx, t, db)
	require.Empty(t, late, "writes under an expired lease")
	return fw
}

// CheckFencedWrites is [RequireFencedWrites] counting instead of failing:
// it returns the fenced writes and a description of each one made at or
// after its lease's expiry (a run that expects losses, such as one across
// an asynchronous failover, reports them rather than stopping at the first).
func CheckFencedWrites(ctx context.Context, t testing.TB, db DBTX) (FencedWrites, []string) {
	t.Helper()
	var fw FencedWrites
	var late []string
	for _, r := range readLeaseAudit(ctx, t, db) {
		if r.oldToken == nil || r.oldState != string(kfstype.RunStateRunning) {
			continue
		}
		switch {
		case sameToken(r.oldToken, r.newToken):
			if !samePtr(r.oldJob, r.newJob) {
				continue // MarkDispatched republished an expired running attempt
			}
			fw.KeptToken++
		case r.newToken == nil && (r.newState == string(kfstype.RunStateSucceeded) || r.newState == string(kfstype.RunStateRetryWait)):
			fw.Outcomes++
		case r.newToken == nil && r.newState == string(kfstype.RunStateFailed) && r.newErrorCode != nil &&
			*r.newErrorCode != kfstype.ErrorCodeOutboxDead && *r.newErrorCode != kfstype.ErrorCodeExecutionAttemptsExhausted:
			fw.Outcomes++
		default:
			continue
		}
		if !r.at.Before(*r.oldExpires) {
			late = append(late, fmt.Sprintf("attempt %s: write %s/%s -> %s/%s under lease %s of %s at %s, after the lease expired at %s",
				r.attempt, r.oldState, r.oldCheckpoint, r.newState, r.newCheckpoint, *r.oldToken, *r.oldWorker, r.at, *r.oldExpires))
		}
	}
	return fw, late
}

func samePtr(a, b *string) bool {
	return a == nil && b == nil || a != nil && b != nil && *a == *b
}
