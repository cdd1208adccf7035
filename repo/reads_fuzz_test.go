package repo

import "testing"

// FuzzReads covers the tenant-scoped reads' validation.
func FuzzReads(f *testing.F) {
	f.Add("tenant-a", uint64(1), uint64(2), uint64(3), int32(1), uint8(0))
	f.Fuzz(func(t *testing.T, tenant string, attempt, space, asset uint64, version int32, op uint8) {
		r := New(nil)
		bad := badFields{}
		bad.check("TenantID", okText(tenant, 255))
		switch op % 4 {
		case 0, 1:
			bad.check("AttemptID", attempt != 0)
		case 2:
			bad.check("KnowledgeSpaceID", space != 0)
			bad.check("DocumentAssetID", asset != 0)
			bad.check("DocumentVersion", version > 0)
		}
		expectOutcome(t, bad, func(db DBTX) error {
			var err error
			switch op % 4 {
			case 0:
				_, err = r.GetAttempt(fuzzCtx, db, &GetAttemptParams{TenantID: tenant, AttemptID: fuzzID(attempt)})
			case 1:
				_, _, err = r.GetAttemptWithOutbox(fuzzCtx, db, &GetAttemptWithOutboxParams{TenantID: tenant, AttemptID: fuzzID(attempt)})
			case 2:
				_, err = r.ListDocumentVersionAttempts(fuzzCtx, db, &ListDocumentVersionAttemptsParams{
					TenantID: tenant, KnowledgeSpaceID: fuzzID(space), DocumentAssetID: fuzzID(asset), DocumentVersion: version,
				})
			case 3:
				_, err = r.CountLiveAttempts(fuzzCtx, db, &CountLiveAttemptsParams{TenantID: tenant})
			}
			return err
		})
	})
}
