package loadgen

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/knowledgefs/kfsdb/kfstype"
	"github.com/knowledgefs/kfsdb/repo"
	"github.com/knowledgefs/kfsdb/worker"
)

// scenario is the tenant, spaces and assets of one run; asset i is in
// space i % len(spaces).
type scenario struct {
	tenant     string
	generation uuid.UUID
	spaces     []spaceSpec
	byID       map[uuid.UUID]*spaceSpec
	assets     []uuid.UUID
}

// spaceOf is the knowledge space of asset i.
func (sc *scenario) spaceOf(i int) uuid.UUID { return sc.spaces[i%len(sc.spaces)].id }

// spaceSpec is one knowledge space and the candidate its attempts bind.
type spaceSpec struct {
	id, candidate uuid.UUID
	fingerprint   string
}

// setup creates a tenant with n assets over the given number of spaces,
// then vacuums and checkpoints so the run starts from a clean state.
func setup(ctx context.Context, pool *pgxpool.Pool, n, spaces int) (*scenario, error) {
	sc, err := setupTenant(ctx, pool, "loadgen-"+uuid.NewString()[:8], n, spaces)
	if err != nil {
		return nil, err
	}
	return sc, settle(ctx, pool)
}

// setupTenant inserts a tenant's spaces, their candidate publications and
// n document assets.
func setupTenant(ctx context.Context, pool *pgxpool.Pool, tenant string, n, spaces int) (*scenario, error) {
	sc := &scenario{tenant: tenant, generation: uuid.New(), byID: map[uuid.UUID]*spaceSpec{}}
	sc.spaces = make([]spaceSpec, spaces)
	var spaceIDs, candidates []uuid.UUID
	var fingerprints []string
	for i := range sc.spaces {
		sp := &sc.spaces[i]
		sp.id, sp.candidate = uuid.New(), uuid.New()
		sum := sha256.Sum256([]byte(sp.candidate.String()))
		sp.fingerprint = "projection-set-sha256:" + hex.EncodeToString(sum[:])
		sc.byID[sp.id] = sp
		spaceIDs, candidates, fingerprints = append(spaceIDs, sp.id), append(candidates, sp.candidate), append(fingerprints, sp.fingerprint)
	}
	sc.assets = make([]uuid.UUID, n)
	assetSpaces := make([]uuid.UUID, n)
	for i := range sc.assets {
		sc.assets[i] = uuid.New()
		assetSpaces[i] = sc.spaceOf(i)
	}
	for _, s := range []struct {
		sql  string
		args []any
	}{
		{`INSERT INTO knowledge_spaces (id, tenant_id, slug, name)
			SELECT s, $2, 'loadgen-' || n, 'Loadgen' FROM unnest($1::uuid[]) WITH ORDINALITY AS t(s, n)`, []any{spaceIDs, sc.tenant}},
		{`INSERT INTO projection_set_publications (id, tenant_id, knowledge_space_id, fingerprint, projection_version, status)
			SELECT c, $2, s, f, 1, 'candidate' FROM unnest($1::uuid[], $3::uuid[], $4::text[]) AS t(c, s, f)`,
			[]any{candidates, sc.tenant, spaceIDs, fingerprints}},
		{`INSERT INTO document_assets (id, knowledge_space_id, filename, mime_type, object_key, sha256, size_bytes, version)
			SELECT a, s, 'doc.pdf', 'application/pdf', 'objects/' || a, md5(a::text) || md5(a::text), 1024, 1
			  FROM unnest($1::uuid[], $2::uuid[]) AS t(a, s)`, []any{sc.assets, assetSpaces}},
	} {
		if _, err := pool.Exec(ctx, s.sql, s.args...); err != nil {
			return nil, fmt.Errorf("loadgen: setup: %w", err)
		}
	}
	return sc, nil
}

// settle vacuums and analyzes the tables and checkpoints (best effort:
// superuser or pg_checkpoint), so runs start from the same state.
func settle(ctx context.Context, pool *pgxpool.Pool) error {
	if _, err := pool.Exec(ctx, `VACUUM ANALYZE knowledge_spaces, document_assets, projection_set_publications,
		document_compilation_attempts, document_compilation_outbox`); err != nil {
		return fmt.Errorf("loadgen: setup: %w", err)
	}
	_, _ = pool.Exec(ctx, "CHECKPOINT")
	return nil
}

// noopHandler does no work. It stores in handled, for each attempt it
// ran to the end, when it was called. With steps it advances one checkpoint at a
// time (Advance moves at most one step) to smoke_eval_passed, binding the
// scenario's candidate at projection_built, and the worker then completes
// the attempt; without, the worker completes through every checkpoint in
// the one write after the lease.
func noopHandler(spaces map[uuid.UUID]*spaceSpec, handled *sync.Map, steps bool) worker.HandlerFunc {
	return func(ctx context.Context, job *worker.Job) error {
		called := time.Now()
		sp := spaces[job.Attempt.KnowledgeSpaceID]
		if sp == nil {
			return worker.Fatal("LOADGEN_UNKNOWN_SPACE", fmt.Errorf("attempt %s is in space %s, which this run did not create", job.Attempt.ID, job.Attempt.KnowledgeSpaceID))
		}
		if !steps {
			job.CompleteThrough(sp.candidate, sp.fingerprint)
			handled.Store(job.Attempt.ID, called)
			return nil
		}
		for _, cp := range []kfstype.Checkpoint{kfstype.CheckpointParsed, kfstype.CheckpointOutlineBuilt, kfstype.CheckpointNodesGenerated} {
			if err := job.Advance(ctx, cp); err != nil {
				return err
			}
		}
		if err := job.BindCandidate(ctx, kfstype.CheckpointProjectionBuilt, sp.candidate, sp.fingerprint); err != nil {
			return err
		}
		if err := job.Advance(ctx, kfstype.CheckpointSmokeEvalPassed); err != nil {
			return err
		}
		handled.Store(job.Attempt.ID, called)
		return nil
	}
}

// ackSource records when each delivery is acknowledged: the worker
// acknowledges only after its outcome (here Complete) committed.
type ackSource struct {
	worker.Source
	onAck func(uuid.UUID)
}

func (s *ackSource) Receive(ctx context.Context) (worker.Message, error) {
	m, err := s.Source.Receive(ctx)
	if err != nil {
		return nil, err
	}
	// A leased message stays a worker.LeasedMessage, so the worker runs
	// it under the source's lease.
	am := &ackMessage{Message: m, onAck: s.onAck}
	if lm, ok := m.(worker.LeasedMessage); ok {
		return &ackLeasedMessage{ackMessage: am, leased: lm}, nil
	}
	return am, nil
}

// ackLeasingSource is ackSource for a source that leases as it fetches
// (pgsource): the worker binds and runs it.
type ackLeasingSource struct {
	worker.LeasingSource
	acks *ackSource
}

func newAckLeasingSource(src worker.LeasingSource, onAck func(uuid.UUID)) *ackLeasingSource {
	return &ackLeasingSource{LeasingSource: src, acks: &ackSource{Source: src, onAck: onAck}}
}

func (s *ackLeasingSource) Receive(ctx context.Context) (worker.Message, error) {
	return s.acks.Receive(ctx)
}

type ackMessage struct {
	worker.Message
	onAck func(uuid.UUID)
}

func (m *ackMessage) Ack(ctx context.Context) error {
	err := m.Message.Ack(ctx)
	m.onAck(m.Delivery().AttemptID)
	return err
}

type ackLeasedMessage struct {
	*ackMessage
	leased worker.LeasedMessage
}

func (m *ackLeasedMessage) Leased() (*kfstype.Attempt, *repo.Lease) { return m.leased.Leased() }
