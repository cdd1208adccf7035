package repo_test

import (
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/knowledgefs/kfsdb/kfstype"
	"github.com/knowledgefs/kfsdb/repo"
	"github.com/knowledgefs/kfsdb/tests/testfactory"
)

// TestCrossTenant calls every control-plane function with another tenant's
// id, or the right tenant and another space: each says "not found" (or
// nothing) and writes nothing.
func TestCrossTenant(t *testing.T) {
	b := setup(t)
	owner := "tenant-" + uuid.NewString()[:8]
	ownScope := func() *testfactory.Scope {
		return testfactory.NewScope(b.ctx, t, b.db.Pool, &testfactory.ScopeOpts{TenantID: &owner})
	}
	sDeferred, sFailed, sLive := ownScope(), ownScope(), ownScope()
	res, err := b.repo.Start(b.ctx, b.db.Pool, &repo.StartParams{
		TenantID: owner, KnowledgeSpaceID: sDeferred.KnowledgeSpaceID, DocumentAssetID: sDeferred.DocumentAssetID,
		DocumentVersion: 1, PublicationGenerationID: uuid.New(), Deferred: true,
	})
	require.NoError(t, err)
	deferred := res.Attempt
	testfactory.RequireInvariants(b.ctx, t, b.db.Pool, deferred.ID)
	failed := b.drv.InState(b.ctx, t, sFailed, kfstype.RunStateFailed)
	live := b.drv.InState(b.ctx, t, sLive, kfstype.RunStateQueued)
	sameTenantOtherSpace := ownScope()
	stranger := b.scope(t) // another tenant with a space of its own
	b.clock.Advance(time.Hour)

	type ref struct {
		name   string
		tenant string
		space  uuid.UUID
	}
	refs := []ref{
		{name: "OtherTenantOwnersSpace", tenant: stranger.TenantID, space: sDeferred.KnowledgeSpaceID},
		{name: "OtherTenantOwnSpace", tenant: stranger.TenantID, space: stranger.KnowledgeSpaceID},
		{name: "SameTenantOtherSpace", tenant: owner, space: sameTenantOtherSpace.KnowledgeSpaceID},
	}
	snap := b.snapshot(t, deferred.ID, failed.ID, live.ID)

	for _, r := range refs {
		t.Run(r.name, func(t *testing.T) {
			mk := func(id uuid.UUID) repo.AttemptRef {
				return repo.AttemptRef{TenantID: r.tenant, KnowledgeSpaceID: r.space, AttemptID: id}
			}
			_, err := b.repo.Start(b.ctx, b.db.Pool, &repo.StartParams{
				TenantID: r.tenant, KnowledgeSpaceID: r.space, DocumentAssetID: sLive.DocumentAssetID,
				DocumentVersion: 1, PublicationGenerationID: uuid.New(),
			})
			require.ErrorIs(t, err, repo.ErrNotFound, "Start")
			snap.requireUnchanged(t, b)

			_, err = b.repo.ReleaseDeferred(b.ctx, b.db.Pool, &repo.ReleaseDeferredParams{AttemptRef: mk(deferred.ID)})
			require.ErrorIs(t, err, repo.ErrNotFound, "ReleaseDeferred")
			snap.requireUnchanged(t, b)

			_, err = b.repo.Cancel(b.ctx, b.db.Pool, &repo.CancelParams{AttemptRef: mk(live.ID), Reason: new("x")})
			require.ErrorIs(t, err, repo.ErrNotFound, "Cancel")
			snap.requireUnchanged(t, b)

			_, err = b.repo.Supersede(b.ctx, b.db.Pool, &repo.SupersedeParams{AttemptRef: mk(live.ID), Reason: new("x")})
			require.ErrorIs(t, err, repo.ErrNotFound, "Supersede")
			snap.requireUnchanged(t, b)

			_, err = b.repo.RetryFailed(b.ctx, b.db.Pool, &repo.RetryFailedParams{AttemptRef: mk(failed.ID)})
			require.ErrorIs(t, err, repo.ErrNotFound, "RetryFailed")
			snap.requireUnchanged(t, b)

			list, err := b.repo.ListDocumentVersionAttempts(b.ctx, b.db.Pool, &repo.ListDocumentVersionAttemptsParams{
				TenantID: r.tenant, KnowledgeSpaceID: r.space, DocumentAssetID: sLive.DocumentAssetID, DocumentVersion: 1,
			})
			require.NoError(t, err)
			require.Empty(t, list, "ListDocumentVersionAttempts")

			if r.tenant != owner {
				n, err := b.repo.Purge(b.ctx, b.db.Pool, &repo.PurgeParams{TenantID: r.tenant, CompletedBefore: b.clock.Now().Add(time.Hour)})
				require.NoError(t, err)
				require.Zero(t, n, "Purge")
				snap.requireUnchanged(t, b)

				for _, id := range []uuid.UUID{deferred.ID, failed.ID, live.ID} {
					_, err = b.repo.GetAttempt(b.ctx, b.db.Pool, &repo.GetAttemptParams{TenantID: r.tenant, AttemptID: id})
					require.ErrorIs(t, err, repo.ErrNotFound, "GetAttempt")
					_, _, err = b.repo.GetAttemptWithOutbox(b.ctx, b.db.Pool, &repo.GetAttemptWithOutboxParams{TenantID: r.tenant, AttemptID: id})
					require.ErrorIs(t, err, repo.ErrNotFound, "GetAttemptWithOutbox")
				}

				counts, err := b.repo.CountLiveAttempts(b.ctx, b.db.Pool, &repo.CountLiveAttemptsParams{TenantID: r.tenant})
				require.NoError(t, err)
				require.Empty(t, counts, "CountLiveAttempts")
			}
			snap.requireUnchanged(t, b)
		})
	}

	// Paired positive: the owner, in the right space, sees and changes them.
	t.Run("OwnerInRightSpace", func(t *testing.T) {
		for _, r := range snap.rows {
			got, err := b.repo.GetAttempt(b.ctx, b.db.Pool, &repo.GetAttemptParams{TenantID: owner, AttemptID: r.Attempt.ID})
			require.NoError(t, err)
			require.Equal(t, r.Attempt, *got)
			ga, go_, err := b.repo.GetAttemptWithOutbox(b.ctx, b.db.Pool, &repo.GetAttemptWithOutboxParams{TenantID: owner, AttemptID: r.Attempt.ID})
			require.NoError(t, err)
			require.Equal(t, r.Attempt, *ga)
			require.Equal(t, r.Outbox, *go_)
		}
		list, err := b.repo.ListDocumentVersionAttempts(b.ctx, b.db.Pool, &repo.ListDocumentVersionAttemptsParams{
			TenantID: owner, KnowledgeSpaceID: sLive.KnowledgeSpaceID, DocumentAssetID: sLive.DocumentAssetID, DocumentVersion: 1,
		})
		require.NoError(t, err)
		require.Len(t, list, 1)
		counts, err := b.repo.CountLiveAttempts(b.ctx, b.db.Pool, &repo.CountLiveAttemptsParams{TenantID: owner})
		require.NoError(t, err)
		require.Equal(t, map[kfstype.RunState]int64{kfstype.RunStateDispatchPending: 1, kfstype.RunStateQueued: 1}, counts)

		_, err = b.repo.ReleaseDeferred(b.ctx, b.db.Pool, &repo.ReleaseDeferredParams{AttemptRef: sDeferred.Ref(deferred.ID)})
		require.NoError(t, err)
		testfactory.RequireInvariants(b.ctx, t, b.db.Pool, deferred.ID)
		_, err = b.repo.Cancel(b.ctx, b.db.Pool, &repo.CancelParams{AttemptRef: sLive.Ref(live.ID)})
		require.NoError(t, err)
		testfactory.RequireInvariants(b.ctx, t, b.db.Pool, live.ID)
		_, err = b.repo.RetryFailed(b.ctx, b.db.Pool, &repo.RetryFailedParams{AttemptRef: sFailed.Ref(failed.ID)})
		require.NoError(t, err)
		testfactory.RequireInvariants(b.ctx, t, b.db.Pool, failed.ID)
		n, err := b.repo.Purge(b.ctx, b.db.Pool, &repo.PurgeParams{TenantID: owner, CompletedBefore: b.clock.Now().Add(time.Hour)})
		require.NoError(t, err)
		require.Equal(t, 1, n) // the canceled one
	})
}
