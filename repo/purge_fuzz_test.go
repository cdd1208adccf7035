package repo

import (
	"testing"
	"time"
)

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
