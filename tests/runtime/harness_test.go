package runtime_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/knowledgefs/kfsdb/kfstype"
	"github.com/knowledgefs/kfsdb/relay"
	"github.com/knowledgefs/kfsdb/repo"
	"github.com/knowledgefs/kfsdb/tests/pgtest"
	"github.com/knowledgefs/kfsdb/tests/testfactory"
	"github.com/knowledgefs/kfsdb/worker"
)

// discardLog keeps the runtime's logs out of test output.
var discardLog = slog.New(slog.DiscardHandler)

// newPool opens a second pool on the test database with room for every
// relay listener, worker goroutine and heartbeat of a test (pgxpool's
// default is max(4, NumCPU), which a LISTEN connection per relay and eight
// workers would starve).
func newPool(t testing.TB, db *pgtest.DB, maxConns int32) *pgxpool.Pool {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(db.URL)
	require.NoError(t, err)
	cfg.MaxConns = maxConns
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	return pool
}

// candidate is a candidate publication a handler binds at projection_built.
type candidate struct {
	ID          uuid.UUID
	Fingerprint string
}

// document is one document version to compile: its scope (one asset of a
// space) and the candidate publication of that space.
type document struct {
	Scope     testfactory.Scope
	Candidate candidate
}

// seedDocuments creates spaces knowledge spaces, each with perSpace asset
// rows and one candidate publication, and returns the document versions.
// Asset rows are inserted in one statement per space, so a thousand
// documents cost a handful of round trips.
func seedDocuments(ctx context.Context, t testing.TB, db repo.DBTX, spaces, perSpace int) []document {
	t.Helper()
	var docs []document
	for range spaces {
		s := testfactory.NewScope(ctx, t, db, nil)
		id, fp := s.Publication(ctx, t, db, "candidate")
		c := candidate{ID: id, Fingerprint: fp}
		docs = append(docs, document{Scope: *s, Candidate: c})
		if perSpace <= 1 {
			continue
		}
		rows, err := db.Query(ctx, `
			INSERT INTO document_assets (id, knowledge_space_id, filename, mime_type, object_key, sha256, size_bytes, version)
			SELECT g.id, $1, 'doc.pdf', 'application/pdf', 'objects/' || g.id, encode(sha256(g.id::text::bytea), 'hex'), 1024, $2
			  FROM (SELECT gen_random_uuid() AS id FROM generate_series(1, $3::int)) g
			RETURNING id`, s.KnowledgeSpaceID, s.DocumentVersion, perSpace-1)
		require.NoError(t, err)
		for rows.Next() {
			var asset uuid.UUID
			require.NoError(t, rows.Scan(&asset))
			scope := *s
			scope.DocumentAssetID = asset
			docs = append(docs, document{Scope: scope, Candidate: c})
		}
		require.NoError(t, rows.Err())
	}
	return docs
}

// startAll starts one attempt per document with up to 8 concurrent
// Starts; maxAttempts (by index, 0 for the default) sets
// MaxExecutionAttempts.
func startAll(ctx context.Context, t testing.TB, r *repo.Repo, db repo.DBTX, docs []document, maxAttempts func(i int) int32) []*kfstype.Attempt {
	t.Helper()
	out := make([]*kfstype.Attempt, len(docs))
	errs := make([]error, len(docs))
	var wg sync.WaitGroup
	sem := make(chan struct{}, 8)
	for i := range docs {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			p := docs[i].Scope.StartParams()
			if maxAttempts != nil {
				p.MaxExecutionAttempts = maxAttempts(i)
			}
			res, err := r.Start(ctx, db, p)
			if err == nil && !res.Created {
				err = fmt.Errorf("document %d: attempt not created", i)
			}
			if err == nil {
				out[i] = res.Attempt
			}
			errs[i] = err
		})
	}
	wg.Wait()
	require.NoError(t, errors.Join(errs...))
	return out
}

// compileJob walks a leased attempt from its checkpoint to
// smoke_eval_passed, binding c at projection_built (unless bound).
func compileJob(ctx context.Context, job *worker.Job, c candidate) error {
	return compileUntil(ctx, job, c, kfstype.CheckpointSmokeEvalPassed)
}

// compileUntil is compileJob stopping at checkpoint last.
func compileUntil(ctx context.Context, job *worker.Job, c candidate, last kfstype.Checkpoint) error {
	cps := kfstype.Checkpoints()
	for i := job.Attempt.Checkpoint.Rank() + 1; i <= last.Rank(); i++ {
		cp := cps[i]
		var err error
		if cp == kfstype.CheckpointProjectionBuilt && job.Attempt.CandidatePublicationID == nil {
			err = job.BindCandidate(ctx, cp, c.ID, c.Fingerprint)
		} else {
			err = job.Advance(ctx, cp)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// candidates maps spaces to their candidate publication, for handlers.
func candidates(docs []document) map[uuid.UUID]candidate {
	m := make(map[uuid.UUID]candidate, len(docs))
	for _, d := range docs {
		m[d.Scope.KnowledgeSpaceID] = d.Candidate
	}
	return m
}

// runAll runs each function in its own goroutine under ctx and returns a
// stop function that cancels ctx, waits for all of them and requires each
// returned context.Canceled.
func runAll(t testing.TB, runs ...func(context.Context) error) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, len(runs))
	for _, run := range runs {
		go func() { done <- run(ctx) }()
	}
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			for range runs {
				select {
				case err := <-done:
					require.ErrorIs(t, err, context.Canceled)
				case <-time.After(30 * time.Second):
					require.FailNow(t, "relay or worker did not stop within 30 s")
				}
			}
		})
	}
	t.Cleanup(stop)
	return stop
}

// newRelay builds a relay; cfg fields left zero take the test defaults
// (discarded logs), then the relay's own defaults.
func newRelay(t testing.TB, pool *pgxpool.Pool, pub relay.Publisher, cfg relay.Config) *relay.Relay {
	t.Helper()
	if cfg.Logger == nil {
		cfg.Logger = discardLog
	}
	rl, err := relay.New(pool, pub, &cfg)
	require.NoError(t, err)
	return rl
}

// newWorker builds a worker like newRelay.
func newWorker(t testing.TB, pool *pgxpool.Pool, src worker.Source, h worker.Handler, cfg worker.Config) *worker.Worker {
	t.Helper()
	if cfg.Logger == nil {
		cfg.Logger = discardLog
	}
	w, err := worker.New(pool, src, h, &cfg)
	require.NoError(t, err)
	return w
}

// liveCount returns how many of ids are still live (not terminal).
func liveCount(ctx context.Context, t testing.TB, db repo.DBTX, ids []uuid.UUID) int {
	t.Helper()
	var n int
	require.NoError(t, db.QueryRow(ctx,
		`SELECT count(*) FROM document_compilation_attempts WHERE id = ANY($1) AND active_slot IS NOT NULL`, ids).Scan(&n))
	return n
}

// requireQuiescent requires that nothing is left to dispatch or run: no
// live attempt and no outbox row pending, dispatching, dispatched or leased.
func requireQuiescent(ctx context.Context, t testing.TB, db repo.DBTX) {
	t.Helper()
	var live, busy int
	require.NoError(t, db.QueryRow(ctx, `SELECT count(*) FROM document_compilation_attempts WHERE active_slot IS NOT NULL OR run_state IN ('dispatch_pending','queued','running','retry_wait')`).Scan(&live))
	require.NoError(t, db.QueryRow(ctx, `SELECT count(*) FROM document_compilation_outbox WHERE status IN ('pending','dispatching','dispatched','leased')`).Scan(&busy))
	require.Zero(t, live, "live attempts left")
	require.Zero(t, busy, "outbox rows still dispatching or leased")
}

func attemptIDs(as []*kfstype.Attempt) []uuid.UUID {
	ids := make([]uuid.UUID, len(as))
	for i, a := range as {
		ids[i] = a.ID
	}
	return ids
}

// median returns the median of ds (which it sorts).
func median(ds []time.Duration) time.Duration {
	sort.Slice(ds, func(i, j int) bool { return ds[i] < ds[j] })
	n := len(ds)
	if n%2 == 1 {
		return ds[n/2]
	}
	return (ds[n/2-1] + ds[n/2]) / 2
}

// installLeaseAudit adds a trigger to the test database that records every
// change of an attempt's lease token, with the statement clock of the
// change and the lease expiry the old token had reached. A lease token's
// validity is [acquired, min(ended, expiry)], read from the database itself
// rather than from the runtime's view of it.
func installLeaseAudit(ctx context.Context, t testing.TB, db repo.DBTX) {
	t.Helper()
	_, err := db.Exec(ctx, `
		CREATE TABLE test_lease_audit (
		  seq         bigserial PRIMARY KEY,
		  attempt_id  uuid NOT NULL,
		  old_token   uuid,
		  old_worker  text,
		  old_expires timestamptz,
		  new_token   uuid,
		  new_worker  text,
		  new_state   text NOT NULL,
		  changed_at  timestamptz NOT NULL
		);
		CREATE FUNCTION test_lease_audit_fn() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN
		  INSERT INTO test_lease_audit (attempt_id, old_token, old_worker, old_expires, new_token, new_worker, new_state, changed_at)
		  VALUES (NEW.id, OLD.lease_token, OLD.worker_id, OLD.lease_expires_at, NEW.lease_token, NEW.worker_id, NEW.run_state, NEW.updated_at);
		  RETURN NULL;
		END $$;
		CREATE TRIGGER test_lease_audit_tg AFTER UPDATE ON document_compilation_attempts
		  FOR EACH ROW WHEN (OLD.lease_token IS DISTINCT FROM NEW.lease_token)
		  EXECUTE FUNCTION test_lease_audit_fn();`)
	require.NoError(t, err)
}

// leaseInterval is one lease token's validity.
type leaseInterval struct {
	AttemptID uuid.UUID
	Token     uuid.UUID
	Worker    string
	Acquired  time.Time
	// End is when the token stopped being valid: the write that ended or
	// replaced it, or its expiry if that came first. Zero while still held.
	End time.Time
}

// readLeaseIntervals rebuilds every lease interval from the audit table.
func readLeaseIntervals(ctx context.Context, t testing.TB, db repo.DBTX) map[uuid.UUID][]leaseInterval {
	t.Helper()
	rows, err := db.Query(ctx, `SELECT attempt_id, old_token, old_worker, old_expires, new_token, new_worker, changed_at FROM test_lease_audit ORDER BY seq`)
	require.NoError(t, err)
	defer rows.Close()
	open := map[uuid.UUID]*leaseInterval{}
	out := map[uuid.UUID][]leaseInterval{}
	for rows.Next() {
		var attempt uuid.UUID
		var oldToken, newToken *uuid.UUID
		var oldWorker, newWorker *string
		var oldExpires *time.Time
		var at time.Time
		require.NoError(t, rows.Scan(&attempt, &oldToken, &oldWorker, &oldExpires, &newToken, &newWorker, &at))
		if oldToken != nil {
			iv := open[*oldToken]
			require.NotNil(t, iv, "lease %s ended without having been acquired", *oldToken)
			iv.End = at
			if oldExpires.Before(at) {
				iv.End = *oldExpires
			}
			out[attempt] = append(out[attempt], *iv)
			delete(open, *oldToken)
		}
		if newToken != nil {
			open[*newToken] = &leaseInterval{AttemptID: attempt, Token: *newToken, Worker: *newWorker, Acquired: at}
		}
	}
	require.NoError(t, rows.Err())
	for _, iv := range open {
		out[iv.AttemptID] = append(out[iv.AttemptID], *iv)
	}
	return out
}

// requireNoOverlap requires that an attempt's lease intervals are disjoint:
// no token was granted while another was still valid.
func requireNoOverlap(t testing.TB, ivs []leaseInterval) {
	t.Helper()
	sorted := append([]leaseInterval(nil), ivs...)
	sort.Slice(sorted, func(i, j int) bool { return sorted[i].Acquired.Before(sorted[j].Acquired) })
	for i := 1; i < len(sorted); i++ {
		prev, cur := sorted[i-1], sorted[i]
		require.False(t, prev.End.IsZero(), "attempt %s: lease %s (%s) still held when %s (%s) was granted", cur.AttemptID, prev.Token, prev.Worker, cur.Token, cur.Worker)
		require.False(t, cur.Acquired.Before(prev.End),
			"attempt %s: lease %s of %s valid until %s overlaps lease %s of %s acquired at %s",
			cur.AttemptID, prev.Token, prev.Worker, prev.End, cur.Token, cur.Worker, cur.Acquired)
	}
}
