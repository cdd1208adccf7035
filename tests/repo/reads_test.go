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

func TestListDocumentVersionAttempts(t *testing.T) {
	t.Parallel()
	t.Run("ListsEveryAttemptOldestFirst", func(t *testing.T) {
		b := setup(t)
		s := b.scope(t)
		var ids []uuid.UUID
		for _, state := range []kfstype.RunState{
			kfstype.RunStateCanceled, kfstype.RunStateFailed, kfstype.RunStateSucceeded, kfstype.RunStateSuperseded,
			kfstype.RunStateRunning,
		} {
			b.clock.Advance(time.Minute)
			ids = append(ids, b.drv.InState(b.ctx, t, s, state).ID)
		}
		// Other document versions do not show up.
		other := b.scope(t)
		b.drv.InState(b.ctx, t, other, kfstype.RunStateDispatchPending)
		otherVersion := testfactory.NewScope(b.ctx, t, b.db.Pool, &testfactory.ScopeOpts{TenantID: &s.TenantID, DocumentVersion: new(int32(2))})
		b.drv.InState(b.ctx, t, otherVersion, kfstype.RunStateDispatchPending)

		got, err := b.repo.ListDocumentVersionAttempts(b.ctx, b.db.Pool, &repo.ListDocumentVersionAttemptsParams{
			TenantID: s.TenantID, KnowledgeSpaceID: s.KnowledgeSpaceID, DocumentAssetID: s.DocumentAssetID, DocumentVersion: s.DocumentVersion,
		})
		require.NoError(t, err)
		require.Len(t, got, len(ids))
		for i, id := range ids {
			require.Equal(t, testfactory.RequireInvariants(b.ctx, t, b.db.Pool, id).Attempt, *got[i])
		}
	})

	t.Run("ListsNothingForUnknownVersion", func(t *testing.T) {
		b := setup(t)
		s := b.scope(t)
		b.drv.InState(b.ctx, t, s, kfstype.RunStateDispatchPending)
		got, err := b.repo.ListDocumentVersionAttempts(b.ctx, b.db.Pool, &repo.ListDocumentVersionAttemptsParams{
			TenantID: s.TenantID, KnowledgeSpaceID: s.KnowledgeSpaceID, DocumentAssetID: s.DocumentAssetID, DocumentVersion: 2,
		})
		require.NoError(t, err)
		require.Empty(t, got)
	})

	t.Run("ValidatesInput", func(t *testing.T) {
		b := setup(t)
		s := b.scope(t)
		for _, tc := range []struct {
			field string
			edit  func(*repo.ListDocumentVersionAttemptsParams)
		}{
			{"TenantID", func(d *repo.ListDocumentVersionAttemptsParams) { d.TenantID = "" }},
			{"KnowledgeSpaceID", func(d *repo.ListDocumentVersionAttemptsParams) { d.KnowledgeSpaceID = uuid.Nil }},
			{"DocumentAssetID", func(d *repo.ListDocumentVersionAttemptsParams) { d.DocumentAssetID = uuid.Nil }},
			{"DocumentVersion", func(d *repo.ListDocumentVersionAttemptsParams) { d.DocumentVersion = 0 }},
		} {
			dv := &repo.ListDocumentVersionAttemptsParams{TenantID: s.TenantID, KnowledgeSpaceID: s.KnowledgeSpaceID, DocumentAssetID: s.DocumentAssetID, DocumentVersion: 1}
			tc.edit(dv)
			_, err := b.repo.ListDocumentVersionAttempts(b.ctx, b.db.Pool, dv)
			requireInputError(t, err, tc.field)
		}
	})
}

func TestCountLiveAttempts(t *testing.T) {
	t.Parallel()
	t.Run("CountsLiveAttemptsPerRunState", func(t *testing.T) {
		b := setup(t)
		tenant := "tenant-" + uuid.NewString()[:8]
		states := []kfstype.RunState{
			kfstype.RunStateDispatchPending, kfstype.RunStateDispatchPending, kfstype.RunStateQueued,
			kfstype.RunStateRunning, kfstype.RunStateRetryWait, kfstype.RunStateRetryWait, kfstype.RunStateRetryWait,
			// Terminal ones are not counted.
			kfstype.RunStateSucceeded, kfstype.RunStateFailed, kfstype.RunStateCanceled, kfstype.RunStateSuperseded,
		}
		for _, state := range states {
			s := testfactory.NewScope(b.ctx, t, b.db.Pool, &testfactory.ScopeOpts{TenantID: &tenant})
			b.drv.InState(b.ctx, t, s, state)
		}
		b.drv.InState(b.ctx, t, b.scope(t), kfstype.RunStateQueued) // another tenant

		counts, err := b.repo.CountLiveAttempts(b.ctx, b.db.Pool, &repo.CountLiveAttemptsParams{TenantID: tenant})
		require.NoError(t, err)
		require.Equal(t, map[kfstype.RunState]int64{
			kfstype.RunStateDispatchPending: 2,
			kfstype.RunStateQueued:          1,
			kfstype.RunStateRunning:         1,
			kfstype.RunStateRetryWait:       3,
		}, counts)
	})

	t.Run("CountsNothingForTenantWithoutAttempts", func(t *testing.T) {
		b := setup(t)
		counts, err := b.repo.CountLiveAttempts(b.ctx, b.db.Pool, &repo.CountLiveAttemptsParams{TenantID: "nobody"})
		require.NoError(t, err)
		require.Empty(t, counts)
		_, err = b.repo.CountLiveAttempts(b.ctx, b.db.Pool, &repo.CountLiveAttemptsParams{TenantID: ""})
		requireInputError(t, err, "TenantID")
	})
}

// TestHeadRevision: the read gives the revision Start's BaseHeadRevision
// must carry (0 before the space has a head, then the head's), and
// ErrNotFound for an unknown space or another tenant's.
func TestHeadRevision(t *testing.T) {
	b := setup(t)
	s := b.scope(t)
	rev, err := b.repo.HeadRevision(b.ctx, b.db.Pool, &repo.HeadRevisionParams{TenantID: s.TenantID, KnowledgeSpaceID: s.KnowledgeSpaceID})
	require.NoError(t, err)
	require.Zero(t, rev, "a space without a head row is at revision 0")

	s.SetHead(b.ctx, t, b.db.Pool, 7)
	rev, err = b.repo.HeadRevision(b.ctx, b.db.Pool, &repo.HeadRevisionParams{TenantID: s.TenantID, KnowledgeSpaceID: s.KnowledgeSpaceID})
	require.NoError(t, err)
	require.EqualValues(t, 7, rev)

	stale := s.StartParams()
	stale.BaseHeadRevision = rev - 1
	_, err = b.repo.Start(b.ctx, b.db.Pool, stale)
	var conflict *repo.HeadConflictError
	require.ErrorAs(t, err, &conflict)
	require.Equal(t, rev, conflict.Actual, "Start checks the revision the read returns")
	p := s.StartParams()
	p.BaseHeadRevision = rev
	res, err := b.repo.Start(b.ctx, b.db.Pool, p)
	require.NoError(t, err)
	require.True(t, res.Created)

	other := b.scope(t)
	_, err = b.repo.HeadRevision(b.ctx, b.db.Pool, &repo.HeadRevisionParams{TenantID: other.TenantID, KnowledgeSpaceID: s.KnowledgeSpaceID})
	require.ErrorIs(t, err, repo.ErrNotFound, "another tenant's space")
	_, err = b.repo.HeadRevision(b.ctx, b.db.Pool, &repo.HeadRevisionParams{TenantID: s.TenantID, KnowledgeSpaceID: uuid.New()})
	require.ErrorIs(t, err, repo.ErrNotFound, "an unknown space")
}
