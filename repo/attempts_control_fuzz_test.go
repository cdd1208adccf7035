package repo

import (
	"testing"
	"time"
)

func FuzzStartParams(f *testing.F) {
	f.Add("tenant-a", uint64(1), uint64(2), uint64(3), int32(1), int32(0), int32(0), false, false)
	f.Fuzz(func(t *testing.T, tenant string, space, asset, gen uint64, version, head, maxAttempts int32, deferred, hasAvailableAt bool) {
		p := &StartParams{
			TenantID: tenant, KnowledgeSpaceID: fuzzID(space), DocumentAssetID: fuzzID(asset), DocumentVersion: version,
			PublicationGenerationID: fuzzID(gen), BaseHeadRevision: head, MaxExecutionAttempts: maxAttempts, Deferred: deferred,
		}
		if hasAvailableAt {
			p.AvailableAt = fuzzPtr(time.Unix(1_700_000_000, 0))
		}
		bad := badFields{}
		bad.check("TenantID", okText(tenant, 255))
		bad.check("KnowledgeSpaceID", space != 0)
		bad.check("DocumentAssetID", asset != 0)
		bad.check("DocumentVersion", version > 0)
		bad.check("PublicationGenerationID", gen != 0)
		bad.check("BaseHeadRevision", head >= 0)
		bad.check("MaxExecutionAttempts", maxAttempts >= 0)
		bad.check("AvailableAt", !(deferred && hasAvailableAt))
		expectOutcome(t, bad, func(db DBTX) error {
			_, err := New(nil).Start(fuzzCtx, db, p)
			return err
		})
	})
}

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

func FuzzPurgeParams(f *testing.F) {
	f.Add("tenant-a", int64(1_700_000_000), false, int32(0))
	f.Fuzz(func(t *testing.T, tenant string, cutoffUnix int64, zeroCutoff bool, batch int32) {
		cutoff := time.Unix(cutoffUnix, 0)
		if zeroCutoff {
			cutoff = time.Time{}
		}
		bad := badFields{}
		bad.check("TenantID", okText(tenant, 255))
		// The zero time.Time means "not set", also when it comes from
		// time.Unix (year 1).
		bad.check("CompletedBefore", !zeroCutoff && !cutoff.Equal(time.Time{}))
		bad.check("BatchSize", batch >= 0 && batch <= 10_000)
		expectOutcome(t, bad, func(db DBTX) error {
			_, err := New(nil).Purge(fuzzCtx, db, &PurgeParams{TenantID: tenant, CompletedBefore: cutoff, BatchSize: batch})
			return err
		})
	})
}
