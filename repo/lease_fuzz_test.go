package repo

import (
	"testing"
	"time"
)

// FuzzAcquireLeaseParams covers AcquireLeaseParams and the Delivery it
// embeds (also through FailExhausted, whose params embed it too).
func FuzzAcquireLeaseParams(f *testing.F) {
	f.Add(uint64(1), "job-1", false, "", "worker-1", int64(0), false)
	f.Fuzz(func(t *testing.T, attempt uint64, queueJobID string, hasExternal bool, externalJobID, workerID string, leaseNanos int64, exhaust bool) {
		d := Delivery{AttemptID: fuzzID(attempt), QueueJobID: queueJobID}
		if hasExternal {
			d.ExternalJobID = &externalJobID
		}
		bad := badFields{}
		bad.check("AttemptID", attempt != 0)
		bad.check("QueueJobID", okText(queueJobID, 255))
		bad.check("ExternalJobID", !hasExternal || okText(externalJobID, 255))
		r := New(nil)
		if exhaust {
			expectOutcome(t, bad, func(db DBTX) error {
				_, err := r.FailExhausted(fuzzCtx, db, &FailExhaustedParams{Delivery: d})
				return err
			})
			return
		}
		bad.check("WorkerID", okText(workerID, 255))
		bad.check("LeaseDuration", leaseNanos >= 0)
		expectOutcome(t, bad, func(db DBTX) error {
			_, _, err := r.AcquireLease(fuzzCtx, db, &AcquireLeaseParams{Delivery: d, WorkerID: workerID, LeaseDuration: time.Duration(leaseNanos)})
			return err
		})
	})
}
