package repo

import (
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/knowledgefs/kfsdb/kfstype"
)

// fuzzLease builds a Lease from fuzzer input and records the oracle's verdict
// on it.
func fuzzLease(bad badFields, has bool, attempt uint64, workerID string, token uint64) *Lease {
	if !has {
		bad["Lease"] = true
		return nil
	}
	bad.check("Lease.AttemptID", attempt != 0)
	bad.check("Lease.WorkerID", okText(workerID, 255))
	bad.check("Lease.Token", token != 0)
	return &Lease{AttemptID: fuzzID(attempt), WorkerID: workerID, Token: fuzzID(token)}
}

// FuzzLeaseCalls covers HeartbeatParams, AdvanceParams (checkpoint and
// candidate fingerprint, through Advance and AdvanceTo), Complete's lease
// and CompleteThroughParams.
func FuzzLeaseCalls(f *testing.F) {
	f.Add(true, uint64(1), "worker-1", uint64(2), uint8(0), int64(0), "parsed", false, uint64(0), false, "")
	f.Fuzz(func(t *testing.T, hasLease bool, attempt uint64, workerID string, token uint64, op uint8, leaseNanos int64,
		checkpoint string, hasCandidate bool, candidate uint64, hasFingerprint bool, fingerprint string,
	) {
		bad := badFields{}
		l := fuzzLease(bad, hasLease, attempt, workerID, token)
		r := New(nil)
		var candidateID *uuid.UUID
		var candidateFingerprint *string
		if hasCandidate {
			candidateID = fuzzPtr(fuzzID(candidate))
		}
		if hasFingerprint {
			candidateFingerprint = &fingerprint
		}
		checkCandidate := func() {
			if hasCandidate {
				bad.check("CandidatePublicationID", candidate != 0)
			}
			if hasFingerprint {
				bad.check("CandidateFingerprint", okFingerprint(fingerprint))
			}
			bad.check("CandidatePublicationID", hasCandidate == hasFingerprint)
		}
		switch op % 5 {
		case 0:
			bad.check("LeaseDuration", leaseNanos >= 0)
			expectOutcome(t, bad, func(db DBTX) error {
				_, err := r.Heartbeat(fuzzCtx, db, &HeartbeatParams{Lease: l, LeaseDuration: time.Duration(leaseNanos)})
				return err
			})
		case 1, 3:
			known := false
			for _, c := range []string{"queued", "parsed", "outline_built", "nodes_generated", "projection_built", "smoke_eval_passed"} {
				known = known || c == checkpoint
			}
			bad.check("Checkpoint", known)
			checkCandidate()
			p := &AdvanceParams{Lease: l, Checkpoint: kfstype.Checkpoint(checkpoint),
				CandidatePublicationID: candidateID, CandidateFingerprint: candidateFingerprint}
			expectOutcome(t, bad, func(db DBTX) error {
				var err error
				if op%5 == 3 {
					_, err = r.AdvanceTo(fuzzCtx, db, (*AdvanceToParams)(p))
				} else {
					_, err = r.Advance(fuzzCtx, db, p)
				}
				return err
			})
		case 2:
			expectOutcome(t, bad, func(db DBTX) error {
				_, err := r.Complete(fuzzCtx, db, &CompleteParams{Lease: l})
				return err
			})
		case 4:
			checkCandidate()
			expectOutcome(t, bad, func(db DBTX) error {
				_, err := r.CompleteThrough(fuzzCtx, db, &CompleteThroughParams{Lease: l,
					CandidatePublicationID: candidateID, CandidateFingerprint: candidateFingerprint})
				return err
			})
		}
	})
}

// FuzzFailParams covers FailParams and ScheduleRetryParams; the stored
// message must be TruncateMessage of the given one.
func FuzzFailParams(f *testing.F) {
	f.Add(true, uint64(1), "worker-1", uint64(2), "DOCUMENT_COMPILATION_FAILED", "boom", false, int64(0))
	f.Fuzz(func(t *testing.T, hasLease bool, attempt uint64, workerID string, token uint64, code, message string, retry bool, delayNanos int64) {
		bad := badFields{}
		l := fuzzLease(bad, hasLease, attempt, workerID, token)
		bad.check("ErrorCode", okText(code, 64))
		bad.check("ErrorMessage", message != "")
		r := New(nil)
		var sent *fakeDB
		if retry {
			bad.check("RetryDelay", delayNanos > 0)
			expectOutcome(t, bad, func(db DBTX) error {
				sent = db.(*fakeDB)
				_, err := r.ScheduleRetry(fuzzCtx, db, &ScheduleRetryParams{Lease: l, RetryDelay: time.Duration(delayNanos), ErrorCode: code, ErrorMessage: message})
				return err
			})
		} else {
			expectOutcome(t, bad, func(db DBTX) error {
				sent = db.(*fakeDB)
				_, err := r.Fail(fuzzCtx, db, &FailParams{Lease: l, ErrorCode: code, ErrorMessage: message})
				return err
			})
		}
		if len(bad) == 0 {
			requireSent(t, sent, TruncateMessage(message))
		}
	})
}
