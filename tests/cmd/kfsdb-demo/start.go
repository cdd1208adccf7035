package main

import (
	"context"
	"fmt"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/knowledgefs/kfsdb/repo"
)

// setup inserts the knowledge spaces and one candidate publication per
// attempt (document assets come with each start).
func (w *workload) setup(ctx context.Context) error {
	b := &pgx.Batch{}
	seen := map[uuid.UUID]bool{}
	for _, e := range w.entries {
		if !seen[e.spaceID] {
			seen[e.spaceID] = true
			b.Queue(`INSERT INTO knowledge_spaces (id, tenant_id, slug, name) VALUES ($1, $2, $3, $4)`,
				e.spaceID, e.tenantID, "space-"+e.spaceID.String()[:8], "Demo space "+e.spaceID.String()[:8])
		}
	}
	for _, e := range w.entries {
		b.Queue(`INSERT INTO projection_set_publications
			(id, tenant_id, knowledge_space_id, fingerprint, projection_version, status)
			VALUES ($1, $2, $3, $4, 1, 'candidate')`, e.pubID, e.tenantID, e.spaceID, e.fingerprint)
	}
	tx, err := w.pool.Begin(ctx)
	if err != nil {
		return fmt.Errorf("setup: begin: %w", err)
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	if err := tx.SendBatch(ctx, b).Close(); err != nil {
		return fmt.Errorf("setup: insert spaces and publications: %w", err)
	}
	return tx.Commit(ctx)
}

// insertAsset inserts the attempt's document asset (version 1).
func insertAsset(ctx context.Context, db repo.DBTX, e *entry) error {
	_, err := db.Exec(ctx, `INSERT INTO document_assets
		(id, knowledge_space_id, filename, mime_type, object_key, sha256, size_bytes, version)
		VALUES ($1, $2, $3, 'application/pdf', $4, $5, $6, 1)`,
		e.assetID, e.spaceID, fmt.Sprintf("report-%04d.pdf", e.idx), "objects/"+e.assetID.String(), hash(e.assetID.String()), 1024+e.idx)
	if err != nil {
		return fmt.Errorf("insert document asset %s: %w", e.assetID, err)
	}
	return nil
}

// start inserts the entry's document asset and starts its attempt: in one
// transaction (the outbox pattern) for inTx scenarios and every third
// other one, else as two statements on the pool.
func (w *workload) start(ctx context.Context, e *entry) error {
	p := &repo.StartParams{
		TenantID: e.tenantID, KnowledgeSpaceID: e.spaceID, DocumentAssetID: e.assetID, DocumentVersion: 1,
		PublicationGenerationID: uuid.New(), MaxExecutionAttempts: e.sc.maxAttempts, Deferred: e.sc.deferred,
	}
	var res *repo.StartResult
	if e.sc.inTx || e.idx%3 == 0 {
		tx, err := w.pool.Begin(ctx)
		if err != nil {
			return fmt.Errorf("start attempt %d: begin: %w", e.idx, err)
		}
		defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
		if err := insertAsset(ctx, tx, e); err != nil {
			return err
		}
		if err := w.lat.time(latCall+"Start (in tx)", func() (err error) {
			res, err = w.repo.Start(ctx, tx, p)
			return err
		}); err != nil {
			return fmt.Errorf("start attempt %d (%s): %w", e.idx, e.sc.name, err)
		}
		// Known before the relay can see the row: routing by attempt id
		// (dead letters, crashes) cannot miss it.
		w.register(e, res.Attempt.ID)
		if err := tx.Commit(ctx); err != nil {
			return fmt.Errorf("start attempt %d: commit: %w", e.idx, err)
		}
	} else {
		if err := insertAsset(ctx, w.pool, e); err != nil {
			return err
		}
		if err := w.lat.time(latCall+"Start", func() (err error) {
			res, err = w.repo.Start(ctx, w.pool, p)
			return err
		}); err != nil {
			return fmt.Errorf("start attempt %d (%s): %w", e.idx, e.sc.name, err)
		}
		w.register(e, res.Attempt.ID)
	}
	if !res.Created {
		return fmt.Errorf("start attempt %d: Start returned the existing attempt %s for a fresh document", e.idx, res.Attempt.ID)
	}
	w.started.Add(1)
	return nil
}
