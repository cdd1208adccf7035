-- Plain reads, each named after the repo method that runs it (repo/reads.go,
-- this file's Go twin). GetAttemptWithOutbox is also the refusal-explaining
-- read: when a guarded write matches no row, repo reads the row with it to
-- say why (not found, stale version, lease lost, invalid transition).

-- name: GetAttempt :one
SELECT *
  FROM document_compilation_attempts a
 WHERE a.id = @id
   AND a.tenant_id = @tenant_id;

-- name: GetAttemptWithOutbox :one
-- An attempt and its outbox row, and the clock the transitions use (to tell
-- an expired lease from another refusal). tenant_id NULL reads any tenant's
-- row: the worker and relay paths use it to explain a refused transition.
SELECT sqlc.embed(a), sqlc.embed(o),
       coalesce(sqlc.narg('now')::timestamptz, now())::timestamptz AS db_now
  FROM document_compilation_attempts a
  JOIN document_compilation_outbox o ON o.attempt_id = a.id
 WHERE a.id = @id
   AND (sqlc.narg('tenant_id')::text IS NULL OR a.tenant_id = sqlc.narg('tenant_id')::text);

-- name: ListDocumentVersionAttempts :many
-- All attempts of a document version, oldest first (UUIDv7 ids sort by
-- creation); served by document_version_idx.
SELECT *
  FROM document_compilation_attempts a
 WHERE a.knowledge_space_id = @knowledge_space_id
   AND a.document_asset_id = @document_asset_id
   AND a.document_version = @document_version
   AND a.tenant_id = @tenant_id
 ORDER BY a.id;

-- name: CountLiveAttempts :many
-- Live attempts of a tenant per run_state (scope_version_active_uq's
-- leading tenant_id column).
SELECT a.run_state, count(*) AS attempts
  FROM document_compilation_attempts a
 WHERE a.tenant_id = @tenant_id
   AND a.active_slot = 1
 GROUP BY a.run_state
 ORDER BY a.run_state;

-- name: TraceContexts :many
-- The Start trace contexts of up to a batch of attempts (migration 0009);
-- attempts started without one have no row.
SELECT t.attempt_id, t.traceparent, t.tracestate
  FROM document_compilation_trace_contexts t
 WHERE t.attempt_id = ANY(@attempt_ids::uuid[]);

-- name: HeadRevision :one
-- The head revision of a tenant's space, what Start's base_head_revision
-- must equal: 0 while the space has no head row. No row when the space does
-- not exist or is another tenant's. Two index lookups (a key of the space,
-- the heads' primary key), checked with EXPLAIN on 5·10^4 spaces.
SELECT coalesce(h.head_revision, 0)::integer AS head_revision
  FROM knowledge_spaces ks
  LEFT JOIN projection_set_publication_heads h
    ON h.tenant_id = ks.tenant_id
   AND h.knowledge_space_id = ks.id
 WHERE ks.id = @knowledge_space_id
   AND ks.tenant_id = @tenant_id;
