package repo_test

import (
	"testing"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/knowledgefs/kfsdb/kfstype"
	"github.com/knowledgefs/kfsdb/repo"
	"github.com/knowledgefs/kfsdb/tests/testfactory"
)

func TestStartMany(t *testing.T) {
	t.Run("CreatesABatchInOneStatement", func(t *testing.T) {
		b := setup(t)
		cfg, err := pgxpool.ParseConfig(b.db.URL)
		require.NoError(t, err)
		counter := &statementCounter{}
		cfg.ConnConfig.Tracer = counter
		pool, err := pgxpool.NewWithConfig(b.ctx, cfg)
		require.NoError(t, err)
		t.Cleanup(pool.Close)

		var ps []*repo.StartParams
		for range 50 {
			ps = append(ps, testfactory.NewScope(b.ctx, t, b.db.Pool, nil).StartParams())
		}
		var res []repo.StartManyResult
		n := counter.count(func() {
			res, err = b.repo.StartMany(b.ctx, pool, &repo.StartManyParams{Starts: ps})
			require.NoError(t, err)
		})
		require.EqualValues(t, 1, n, "a batch of new versions is one statement")
		require.Len(t, res, 50)
		for i, r := range res {
			require.NoError(t, r.Err)
			require.True(t, r.Created)
			require.Equal(t, ps[i].DocumentAssetID, r.Attempt.DocumentAssetID, "results are in input order")
			rows := b.rows(t, r.Attempt.ID)
			require.Equal(t, *r.Attempt, rows.Attempt)
			require.Equal(t, kfstype.RunStateDispatchPending, rows.Attempt.RunState)
			require.Equal(t, kfstype.OutboxStatusPending, rows.Outbox.Status)
			require.True(t, rows.Outbox.AvailableAt.Equal(b.clock.Now()))
		}
		msgs, err := b.repo.ClaimOutbox(b.ctx, pool, &repo.ClaimOutboxParams{RelayID: "r", BatchSize: 100})
		require.NoError(t, err)
		require.Len(t, msgs, 50)
	})

	t.Run("ReturnsLiveAttemptsAndExplainsRefusalsPerEntry", func(t *testing.T) {
		b := setup(t)
		fresh := testfactory.NewScope(b.ctx, t, b.db.Pool, nil)
		live := testfactory.NewScope(b.ctx, t, b.db.Pool, nil)
		liveAttempt := b.drv.Start(b.ctx, t, live, nil)
		headed := testfactory.NewScope(b.ctx, t, b.db.Pool, nil)
		headed.SetHead(b.ctx, t, b.db.Pool, 3)
		missing := fresh.StartParams()
		missing.DocumentAssetID = uuid.New()
		otherTenant := live.StartParams()
		otherTenant.TenantID = "someone-else"

		res, err := b.repo.StartMany(b.ctx, b.db.Pool, &repo.StartManyParams{Starts: []*repo.StartParams{
			fresh.StartParams(), live.StartParams(), headed.StartParams(), missing, otherTenant,
		}})
		require.NoError(t, err)
		require.Len(t, res, 5)
		require.NoError(t, res[0].Err)
		require.True(t, res[0].Created)
		b.rows(t, res[0].Attempt.ID)
		require.NoError(t, res[1].Err)
		require.False(t, res[1].Created)
		require.Equal(t, *liveAttempt, *res[1].Attempt)
		var conflict *repo.HeadConflictError
		require.ErrorAs(t, res[2].Err, &conflict)
		require.EqualValues(t, 0, conflict.Expected)
		require.EqualValues(t, 3, conflict.Actual)
		require.ErrorIs(t, res[3].Err, repo.ErrNotFound)
		require.ErrorIs(t, res[4].Err, repo.ErrNotFound)

		var attempts int
		require.NoError(t, b.db.Pool.QueryRow(b.ctx, "SELECT count(*) FROM document_compilation_attempts").Scan(&attempts))
		require.Equal(t, 2, attempts, "only the fresh version was created")
	})

	t.Run("RefusedEntriesCostTwoStatementsEach", func(t *testing.T) {
		// docs/ADOPTING.md's "1 + 2 per refused entry": the batch statement
		// (which also returns live attempts), then each refused entry
		// through Start alone, its statement and the read that explains it.
		b := setup(t)
		pool, counter := b.cmCountedPool(t)
		live := b.scope(t)
		b.drv.Start(b.ctx, t, live, nil)
		headed := b.scope(t)
		headed.SetHead(b.ctx, t, b.db.Pool, 3)
		missing := b.scope(t).StartParams()
		missing.DocumentVersion = 7
		var res []repo.StartManyResult
		n := counter.count(func() {
			var err error
			res, err = b.repo.StartMany(b.ctx, pool, &repo.StartManyParams{Starts: []*repo.StartParams{
				b.scope(t).StartParams(), live.StartParams(), headed.StartParams(), missing,
			}})
			require.NoError(t, err)
		})
		require.NoError(t, res[0].Err)
		require.NoError(t, res[1].Err)
		require.ErrorIs(t, res[2].Err, repo.ErrHeadConflict)
		require.ErrorIs(t, res[3].Err, repo.ErrNotFound)
		require.EqualValues(t, 1+2*2, n, "statements sent")
	})

	t.Run("RejectsInvalidBatches", func(t *testing.T) {
		b := setup(t)
		s := b.scope(t)
		deferred := s.StartParams()
		deferred.Deferred = true
		bad := s.StartParams()
		bad.TenantID = ""
		tooMany := make([]*repo.StartParams, repo.MaxBatchSize+1)
		for i := range tooMany {
			tooMany[i] = s.StartParams()
		}
		for name, ps := range map[string][]*repo.StartParams{
			"Empty":            nil,
			"TooMany":          tooMany,
			"NilEntry":         {s.StartParams(), nil},
			"InvalidEntry":     {s.StartParams(), bad},
			"Deferred":         {deferred},
			"DuplicateVersion": {s.StartParams(), s.StartParams()},
		} {
			t.Run(name, func(t *testing.T) {
				_, err := b.repo.StartMany(b.ctx, b.db.Pool, &repo.StartManyParams{Starts: ps})
				require.ErrorIs(t, err, repo.ErrInvalidInput)
			})
		}
		var attempts int
		require.NoError(t, b.db.Pool.QueryRow(b.ctx, "SELECT count(*) FROM document_compilation_attempts").Scan(&attempts))
		require.Zero(t, attempts)
	})
}
