package repo_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/knowledgefs/kfsdb/kfstype"
	"github.com/knowledgefs/kfsdb/repo"
	"github.com/knowledgefs/kfsdb/tests/testfactory"
)

// ctlClaimable reports whether a relay claims the attempt's outbox row now
// (the claim is rolled back, so it changes nothing).
func ctlClaimable(t *testing.T, b *testBundle, attemptID uuid.UUID) bool {
	t.Helper()
	tx, err := b.db.Pool.Begin(b.ctx)
	require.NoError(t, err)
	defer func() { require.NoError(t, tx.Rollback(context.WithoutCancel(b.ctx))) }()
	msgs, err := b.repo.ClaimOutbox(b.ctx, tx, &repo.ClaimOutboxParams{RelayID: "relay-probe", BatchSize: 100})
	require.NoError(t, err)
	for _, m := range msgs {
		if m.AttemptID == attemptID {
			return true
		}
	}
	return false
}

func TestStart(t *testing.T) {
	t.Parallel()

	t.Run("CreatesAttemptAndOutboxRow", func(t *testing.T) {
		b := setup(t)
		s := b.scope(t)
		p := s.StartParams()
		res, err := b.repo.Start(b.ctx, b.db.Pool, p)
		require.NoError(t, err)
		require.True(t, res.Created)
		require.EqualValues(t, 7, res.Attempt.ID.Version())

		got := testfactory.RequireInvariants(b.ctx, t, b.db.Pool, res.Attempt.ID)
		now := b.clock.Now()
		require.Equal(t, testfactory.ExpectStarted(got, p, repo.MaxExecutionAttemptsDefault, now, now), got)
		require.NotEqual(t, uuid.Nil, got.Outbox.ID)
		require.JSONEq(t, `{"attemptId":"`+res.Attempt.ID.String()+`"}`, string(got.Outbox.Payload))
		require.Equal(t, got.Attempt, *res.Attempt)
		require.True(t, ctlClaimable(t, b, res.Attempt.ID))
	})

	t.Run("HonoursMaxExecutionAttemptsAndBaseHead", func(t *testing.T) {
		b := setup(t)
		s := b.scope(t)
		s.SetHead(b.ctx, t, b.db.Pool, 4)
		p := s.StartParams()
		p.MaxExecutionAttempts = 2
		p.BaseHeadRevision = 4
		res, err := b.repo.Start(b.ctx, b.db.Pool, p)
		require.NoError(t, err)
		require.True(t, res.Created)
		got := testfactory.RequireInvariants(b.ctx, t, b.db.Pool, res.Attempt.ID)
		require.Equal(t, testfactory.ExpectStarted(got, p, 2, b.clock.Now(), b.clock.Now()), got)
		require.Equal(t, got.Attempt, *res.Attempt)
	})

	t.Run("ReturnsLiveAttemptUnchanged", func(t *testing.T) {
		b := setup(t)
		s := b.scope(t)
		for _, state := range ctlLiveStates {
			t.Run(ctlStateName(state), func(t *testing.T) {
				// A scope per state, all in this subtest's database.
				s := testfactory.NewScope(b.ctx, t, b.db.Pool, &testfactory.ScopeOpts{TenantID: &s.TenantID})
				a := b.drv.InState(b.ctx, t, s, state)
				snap := b.snapshot(t, a.ID)
				b.clock.Advance(time.Minute)
				p := s.StartParams() // a different generation id: still the same version
				p.MaxExecutionAttempts = 9
				res, err := b.repo.Start(b.ctx, b.db.Pool, p)
				require.NoError(t, err)
				require.False(t, res.Created)
				require.Equal(t, snap.rows[0].Attempt, *res.Attempt)
				snap.requireUnchanged(t, b)
			})
		}
	})

	t.Run("StartsAnewOnceTheLiveAttemptEnded", func(t *testing.T) {
		b := setup(t)
		s := b.scope(t)
		for _, state := range ctlTerminalStates {
			old := b.drv.InState(b.ctx, t, s, state)
			snap := b.snapshot(t, old.ID)
			now := b.clock.Advance(time.Minute)
			p := s.StartParams()
			res, err := b.repo.Start(b.ctx, b.db.Pool, p)
			require.NoError(t, err)
			require.True(t, res.Created, "after %s", state)
			require.NotEqual(t, old.ID, res.Attempt.ID)
			got := testfactory.RequireInvariants(b.ctx, t, b.db.Pool, res.Attempt.ID)
			require.Equal(t, testfactory.ExpectStarted(got, p, repo.MaxExecutionAttemptsDefault, now, now), got)
			require.Equal(t, *snap.rows[0], *testfactory.RequireInvariants(b.ctx, t, b.db.Pool, old.ID))
			// End it so the next state gets the slot.
			_, err = b.repo.Cancel(b.ctx, b.db.Pool, &repo.CancelParams{AttemptRef: s.Ref(res.Attempt.ID)})
			require.NoError(t, err)
			testfactory.RequireInvariants(b.ctx, t, b.db.Pool, res.Attempt.ID)
		}
	})

	t.Run("DelaysFirstPublicationToAvailableAt", func(t *testing.T) {
		b := setup(t)
		s := b.scope(t)
		p := s.StartParams()
		due := b.clock.Now().Add(10 * time.Minute)
		p.AvailableAt = &due
		res, err := b.repo.Start(b.ctx, b.db.Pool, p)
		require.NoError(t, err)
		got := testfactory.RequireInvariants(b.ctx, t, b.db.Pool, res.Attempt.ID)
		require.Equal(t, testfactory.ExpectStarted(got, p, repo.MaxExecutionAttemptsDefault, b.clock.Now(), due), got)

		b.clock.Advance(10*time.Minute - time.Microsecond)
		require.False(t, ctlClaimable(t, b, res.Attempt.ID))
		b.clock.Advance(time.Microsecond)
		require.True(t, ctlClaimable(t, b, res.Attempt.ID))
		require.Equal(t, *got, *testfactory.RequireInvariants(b.ctx, t, b.db.Pool, res.Attempt.ID))
	})

	t.Run("RefusesStaleBaseHeadRevision", func(t *testing.T) {
		b := setup(t)
		for _, tc := range []struct {
			name     string
			head     int32 // 0: the space has no head
			base     int32
			conflict bool
		}{
			{"NoHeadBaseZero", 0, 0, false},
			{"NoHeadBaseOne", 0, 1, true},
			{"HeadAheadOfBase", 3, 2, true},
			{"HeadBehindBase", 3, 4, true},
			{"BaseZeroWithHead", 3, 0, true},
			{"BaseMatchesHead", 3, 3, false},
		} {
			t.Run(tc.name, func(t *testing.T) {
				s := b.scope(t)
				if tc.head != 0 {
					s.SetHead(b.ctx, t, b.db.Pool, tc.head)
				}
				p := s.StartParams()
				p.BaseHeadRevision = tc.base
				before := b.dump(t)
				res, err := b.repo.Start(b.ctx, b.db.Pool, p)
				if !tc.conflict {
					require.NoError(t, err)
					require.True(t, res.Created)
					got := testfactory.RequireInvariants(b.ctx, t, b.db.Pool, res.Attempt.ID)
					require.Equal(t, testfactory.ExpectStarted(got, p, repo.MaxExecutionAttemptsDefault, b.clock.Now(), b.clock.Now()), got)
					return
				}
				var hc *repo.HeadConflictError
				require.ErrorAs(t, err, &hc)
				require.ErrorIs(t, err, repo.ErrHeadConflict)
				require.Equal(t, repo.HeadConflictError{Expected: tc.base, Actual: tc.head}, *hc)
				require.Equal(t, before, b.dump(t))
			})
		}
	})

	t.Run("RefusesMissingSpaceOrAssetVersion", func(t *testing.T) {
		b := setup(t)
		s := b.scope(t)
		stranger := b.scope(t)
		sibling := testfactory.NewScope(b.ctx, t, b.db.Pool, &testfactory.ScopeOpts{TenantID: &s.TenantID})
		existing := b.drv.InState(b.ctx, t, stranger, kfstype.RunStateDispatchPending)
		snap := b.snapshot(t, existing.ID)
		for _, tc := range []struct {
			name string
			edit func(*repo.StartParams)
		}{
			{"UnknownSpace", func(p *repo.StartParams) { p.KnowledgeSpaceID = uuid.New() }},
			{"UnknownAsset", func(p *repo.StartParams) { p.DocumentAssetID = uuid.New() }},
			{"UnknownVersion", func(p *repo.StartParams) { p.DocumentVersion = 2 }},
			{"AssetOfAnotherSpace", func(p *repo.StartParams) { p.KnowledgeSpaceID = sibling.KnowledgeSpaceID }},
			{"SpaceOfAnotherTenant", func(p *repo.StartParams) {
				p.KnowledgeSpaceID, p.DocumentAssetID = stranger.KnowledgeSpaceID, stranger.DocumentAssetID
			}},
		} {
			t.Run(tc.name, func(t *testing.T) {
				p := s.StartParams()
				tc.edit(p)
				_, err := b.repo.Start(b.ctx, b.db.Pool, p)
				require.ErrorIs(t, err, repo.ErrNotFound)
				snap.requireUnchanged(t, b)
			})
		}
	})

	t.Run("ValidatesInput", func(t *testing.T) {
		b := setup(t)
		s := b.scope(t)
		due := b.clock.Now()
		for _, tc := range []struct {
			name  string
			field string
			edit  func(*repo.StartParams)
		}{
			{"EmptyTenant", "TenantID", func(p *repo.StartParams) { p.TenantID = "" }},
			{"TenantOf256Characters", "TenantID", func(p *repo.StartParams) { p.TenantID = strings.Repeat("t", 256) }},
			{"NulInTenant", "TenantID", func(p *repo.StartParams) { p.TenantID = "ten\x00ant" }},
			{"InvalidUTF8Tenant", "TenantID", func(p *repo.StartParams) { p.TenantID = "ten\xffant" }},
			{"ZeroSpace", "KnowledgeSpaceID", func(p *repo.StartParams) { p.KnowledgeSpaceID = uuid.Nil }},
			{"ZeroAsset", "DocumentAssetID", func(p *repo.StartParams) { p.DocumentAssetID = uuid.Nil }},
			{"ZeroGeneration", "PublicationGenerationID", func(p *repo.StartParams) { p.PublicationGenerationID = uuid.Nil }},
			{"VersionZero", "DocumentVersion", func(p *repo.StartParams) { p.DocumentVersion = 0 }},
			{"NegativeVersion", "DocumentVersion", func(p *repo.StartParams) { p.DocumentVersion = -1 }},
			{"NegativeBaseHead", "BaseHeadRevision", func(p *repo.StartParams) { p.BaseHeadRevision = -1 }},
			{"NegativeMaxAttempts", "MaxExecutionAttempts", func(p *repo.StartParams) { p.MaxExecutionAttempts = -1 }},
			{"DeferredWithAvailableAt", "AvailableAt", func(p *repo.StartParams) { p.Deferred, p.AvailableAt = true, &due }},
		} {
			t.Run(tc.name, func(t *testing.T) {
				p := s.StartParams()
				tc.edit(p)
				res, err := b.repo.Start(b.ctx, b.db.Pool, p)
				requireInputError(t, err, tc.field)
				require.Nil(t, res)
				require.Zero(t, ctlCount(t, b, "document_compilation_attempts"))
				require.Zero(t, ctlCount(t, b, "document_compilation_outbox"))
			})
		}
	})

	t.Run("AcceptsTenantOf255Characters", func(t *testing.T) {
		b := setup(t)
		tenant := strings.Repeat("t", 255)
		s := testfactory.NewScope(b.ctx, t, b.db.Pool, &testfactory.ScopeOpts{TenantID: &tenant})
		p := s.StartParams()
		res, err := b.repo.Start(b.ctx, b.db.Pool, p)
		require.NoError(t, err)
		got := testfactory.RequireInvariants(b.ctx, t, b.db.Pool, res.Attempt.ID)
		require.Equal(t, testfactory.ExpectStarted(got, p, repo.MaxExecutionAttemptsDefault, b.clock.Now(), b.clock.Now()), got)
	})

	t.Run("ConcurrentStartsCreateOneAttempt", func(t *testing.T) {
		b := setup(t)
		const callers = 16
		for round := range 5 {
			s := b.scope(t)
			var (
				wg      sync.WaitGroup
				gate    = make(chan struct{})
				results = make([]*repo.StartResult, callers)
				errs    = make([]error, callers)
			)
			for i := range callers {
				wg.Go(func() {
					<-gate
					results[i], errs[i] = b.repo.Start(b.ctx, b.db.Pool, s.StartParams())
				})
			}
			close(gate)
			wg.Wait()

			created := 0
			for i := range callers {
				require.NoError(t, errs[i], "round %d caller %d", round, i)
				require.Equal(t, results[0].Attempt.ID, results[i].Attempt.ID, "round %d caller %d", round, i)
				if results[i].Created {
					created++
				}
			}
			require.Equal(t, 1, created, "round %d", round)
			list, err := b.repo.ListDocumentVersionAttempts(b.ctx, b.db.Pool, &repo.ListDocumentVersionAttemptsParams{
				TenantID: s.TenantID, KnowledgeSpaceID: s.KnowledgeSpaceID, DocumentAssetID: s.DocumentAssetID, DocumentVersion: s.DocumentVersion,
			})
			require.NoError(t, err)
			require.Len(t, list, 1)
			got := testfactory.RequireInvariants(b.ctx, t, b.db.Pool, list[0].ID)
			for i := range callers {
				require.Equal(t, got.Attempt, *results[i].Attempt)
			}
		}
		require.Equal(t, 5, ctlCount(t, b, "document_compilation_outbox"))
	})

	// The outbox pattern: the application writes its document row and starts
	// the compilation in one transaction of its own.
	for _, commit := range []bool{false, true} {
		name := "RolledBackTransactionLeavesNoAssetAttemptOrOutboxRow"
		if commit {
			name = "CommittedTransactionKeepsAssetAttemptAndOutboxRow"
		}
		t.Run(name, func(t *testing.T) {
			b := setup(t)
			s := b.scope(t)
			assetID := uuid.New()

			tx, err := b.db.Pool.Begin(b.ctx)
			require.NoError(t, err)
			defer func() { _ = tx.Rollback(context.WithoutCancel(b.ctx)) }()
			_, err = tx.Exec(b.ctx, `INSERT INTO document_assets
				(id, knowledge_space_id, filename, mime_type, object_key, sha256, size_bytes, version)
				VALUES ($1, $2, 'new.pdf', 'application/pdf', $3, repeat('a', 64), 2048, 1)`,
				assetID, s.KnowledgeSpaceID, "objects/"+assetID.String())
			require.NoError(t, err)
			p := s.StartParams()
			p.DocumentAssetID = assetID
			res, err := b.repo.Start(b.ctx, tx, p)
			require.NoError(t, err)
			require.True(t, res.Created)
			inTx := testfactory.RequireInvariants(b.ctx, t, tx, res.Attempt.ID)
			require.Equal(t, testfactory.ExpectStarted(inTx, p, repo.MaxExecutionAttemptsDefault, b.clock.Now(), b.clock.Now()), inTx)
			// Invisible outside the transaction until it commits: no relay
			// publishes an attempt whose document may still roll back.
			require.Zero(t, ctlCount(t, b, "document_compilation_attempts"))
			require.False(t, ctlClaimable(t, b, res.Attempt.ID))

			var assets, attempts, outbox int
			if !commit {
				require.NoError(t, tx.Rollback(b.ctx))
			} else {
				require.NoError(t, tx.Commit(b.ctx))
				after := testfactory.RequireInvariants(b.ctx, t, b.db.Pool, res.Attempt.ID)
				require.Equal(t, *inTx, *after)
				require.True(t, ctlClaimable(t, b, res.Attempt.ID))
				assets, attempts, outbox = 1, 1, 1
			}
			var n int
			require.NoError(t, b.db.Pool.QueryRow(b.ctx, `SELECT count(*) FROM document_assets WHERE id = $1`, assetID).Scan(&n))
			require.Equal(t, assets, n)
			require.Equal(t, attempts, ctlCount(t, b, "document_compilation_attempts"))
			require.Equal(t, outbox, ctlCount(t, b, "document_compilation_outbox"))
		})
	}
}
