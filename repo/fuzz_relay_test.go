package repo

import (
	"fmt"
	"testing"
	"time"

	"github.com/google/uuid"
)

func FuzzClaimParams(f *testing.F) {
	f.Add("relay-1", int32(100), int64(0))
	f.Fuzz(func(t *testing.T, relayID string, batch int32, lockNanos int64) {
		bad := badFields{}
		bad.check("RelayID", okText(relayID, 255))
		bad.check("BatchSize", batch >= 1 && batch <= 100)
		bad.check("LockDuration", lockNanos >= 0)
		expectOutcome(t, bad, func(db DBTX) error {
			_, err := New(nil).ClaimOutbox(fuzzCtx, db, &ClaimParams{RelayID: relayID, BatchSize: batch, LockDuration: time.Duration(lockNanos)})
			return err
		})
	})
}

// FuzzMarkDispatchedParams builds a batch of n dispatches in which the
// fuzzer picks which entry has a zero outbox id, a zero lock token, a
// duplicate outbox id, or the fuzzed job ids.
func FuzzMarkDispatchedParams(f *testing.F) {
	f.Add(uint8(1), int8(-1), int8(-1), int8(-1), int8(0), "job-1", false, "", int64(0))
	f.Fuzz(func(t *testing.T, n uint8, zeroOutbox, zeroToken, dupAt, fuzzAt int8, queueJobID string, hasExternal bool, externalJobID string, visibilityNanos int64) {
		bad := badFields{}
		size := int(n) % 103 // 0..102: both sides of 1..100
		bad.check("Dispatches", size >= 1 && size <= 100)
		bad.check("VisibilityTimeout", visibilityNanos >= 0)
		ds := make([]Dispatch, size)
		for i := range ds {
			field := fmt.Sprintf("Dispatches[%d].", i)
			d := Dispatch{OutboxID: fuzzID(uint64(i) + 1), LockToken: fuzzID(uint64(i) + 1000), QueueJobID: fmt.Sprintf("job-%d", i)}
			if i == int(fuzzAt) {
				d.QueueJobID = queueJobID
				bad.check(field+"QueueJobID", okText(queueJobID, 255))
				if hasExternal {
					d.ExternalJobID = &externalJobID
					bad.check(field+"ExternalJobID", okText(externalJobID, 255))
				}
			}
			if i == int(zeroOutbox) {
				d.OutboxID = uuid.Nil
				bad[field+"OutboxID"] = true
			}
			if i == int(zeroToken) {
				d.LockToken = uuid.Nil
				bad[field+"LockToken"] = true
			}
			if i > 0 && i == int(dupAt) {
				d.OutboxID = ds[0].OutboxID
				bad[field+"OutboxID"] = true
			}
			ds[i] = d
		}
		expectOutcome(t, bad, func(db DBTX) error {
			_, err := New(nil).MarkDispatched(fuzzCtx, db, &MarkDispatchedParams{Dispatches: ds, VisibilityTimeout: time.Duration(visibilityNanos)})
			return err
		})
	})
}

func FuzzReleaseOutboxParams(f *testing.F) {
	f.Add(uint64(1), uint64(2), int64(time.Second), int32(0), "publish failed")
	f.Fuzz(func(t *testing.T, outbox, token uint64, backoffNanos int64, maxAttempts int32, lastError string) {
		bad := badFields{}
		bad.check("OutboxID", outbox != 0)
		bad.check("LockToken", token != 0)
		bad.check("Backoff", backoffNanos > 0)
		bad.check("MaxDispatchAttempts", maxAttempts >= 0)
		bad.check("LastError", lastError != "")
		var sent *fakeDB
		expectOutcome(t, bad, func(db DBTX) error {
			sent = db.(*fakeDB)
			_, err := New(nil).ReleaseOutbox(fuzzCtx, db, &ReleaseOutboxParams{
				OutboxID: fuzzID(outbox), LockToken: fuzzID(token), Backoff: time.Duration(backoffNanos),
				MaxDispatchAttempts: maxAttempts, LastError: lastError,
			})
			return err
		})
		if len(bad) == 0 {
			requireSent(t, sent, TruncateMessage(lastError))
		}
	})
}
