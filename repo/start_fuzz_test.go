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
