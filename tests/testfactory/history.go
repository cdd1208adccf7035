package testfactory

import (
	"context"
	"fmt"
)

// InsertHistory adds n terminal attempts (failed or canceled, completed
// about 29 days ago) with their outbox rows, 100 per document version, in
// tenants history-0 .. history-49, then runs ANALYZE. It stands for the
// history that retention keeps, for plan and scale tests. n must be a
// multiple of 100; each call adds new spaces, so calls accumulate.
func InsertHistory(ctx context.Context, db DBTX, n int) error {
	if n%100 != 0 {
		return fmt.Errorf("InsertHistory: n=%d is not a multiple of 100", n)
	}
	if n == 0 {
		return nil
	}
	if _, err := db.Exec(ctx, `
		WITH spaces AS (
		  INSERT INTO knowledge_spaces (id, tenant_id, slug, name)
		  SELECT gen_random_uuid(), 'history-' || (g % 50), 'h-' || gen_random_uuid(), 'History'
		    FROM generate_series(1, $1::int / 100) g
		  RETURNING id, tenant_id
		), assets AS (
		  INSERT INTO document_assets (id, knowledge_space_id, filename, mime_type, object_key, sha256, size_bytes, version)
		  SELECT gen_random_uuid(), s.id, 'h.pdf', 'application/pdf', 'k', repeat('0', 64), 1, 1 FROM spaces s
		  RETURNING id, knowledge_space_id
		), attempts AS (
		  INSERT INTO document_compilation_attempts (id, tenant_id, knowledge_space_id, document_asset_id,
		    document_version, publication_generation_id, base_head_revision, checkpoint, run_state,
		    active_slot, execution_attempts, max_execution_attempts, last_error_code, row_version,
		    created_at, updated_at, completed_at)
		  SELECT gen_random_uuid(), s.tenant_id, a.knowledge_space_id, a.id, 1, gen_random_uuid(), 0,
		         'queued', CASE WHEN g % 3 = 0 THEN 'failed' ELSE 'canceled' END, NULL, 1, 5, 'X', 3,
		         now() - interval '30 days', now() - interval '29 days', now() - interval '29 days' + g * interval '1 ms'
		    FROM assets a JOIN spaces s ON s.id = a.knowledge_space_id, generate_series(1, 100) g
		  RETURNING id, run_state, created_at
		)
		INSERT INTO document_compilation_outbox (id, attempt_id, event_type, schema_version, payload,
		  idempotency_key, status, dispatch_attempts, available_at, created_at, updated_at)
		SELECT gen_random_uuid(), id, 'document.compile', 1, jsonb_build_object('attemptId', id),
		       'document.compile:' || id, CASE WHEN run_state = 'failed' THEN 'dead' ELSE 'canceled' END,
		       1, created_at, created_at, created_at
		  FROM attempts`, n); err != nil {
		return fmt.Errorf("insert %d historical attempts: %w", n, err)
	}
	if _, err := db.Exec(ctx, "ANALYZE"); err != nil {
		return fmt.Errorf("analyze: %w", err)
	}
	return nil
}
