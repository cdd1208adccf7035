package repo

import "testing"

// FuzzAttemptRef covers AttemptRef's validation through every control-plane
// call that takes one: Cancel and Supersede (with an optional reason, which
// is truncated, never refused), RetryFailed and ReleaseDeferred.
func FuzzAttemptRef(f *testing.F) {
	f.Add("tenant-a", uint64(1), uint64(2), false, int32(0), uint8(0), false, "")
	f.Fuzz(func(t *testing.T, tenant string, space, attempt uint64, hasExpected bool, expected int32, op uint8, hasReason bool, reason string) {
		ref := AttemptRef{TenantID: tenant, KnowledgeSpaceID: fuzzID(space), AttemptID: fuzzID(attempt)}
		if hasExpected {
			ref.ExpectedRowVersion = &expected
		}
		var why *string
		if hasReason {
			why = &reason
		}
		bad := badFields{}
		bad.check("TenantID", okText(tenant, 255))
		bad.check("KnowledgeSpaceID", space != 0)
		bad.check("AttemptID", attempt != 0)
		bad.check("ExpectedRowVersion", !hasExpected || expected >= 0)
		r := New(nil)
		expectOutcome(t, bad, func(db DBTX) error {
			var err error
			switch op % 4 {
			case 0:
				_, err = r.Cancel(fuzzCtx, db, &CancelParams{AttemptRef: ref, Reason: why})
			case 1:
				_, err = r.Supersede(fuzzCtx, db, &SupersedeParams{AttemptRef: ref, Reason: why})
			case 2:
				_, err = r.RetryFailed(fuzzCtx, db, &RetryFailedParams{AttemptRef: ref})
			case 3:
				_, err = r.ReleaseDeferred(fuzzCtx, db, &ReleaseDeferredParams{AttemptRef: ref})
			}
			return err
		})
	})
}
