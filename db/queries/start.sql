-- Starting attempts: Start inserts an attempt and its outbox row in the
-- caller's transaction (StartPreconditions says why one inserted nothing),
-- StartMany does it for a batch. Every statement is tenant-scoped (tenant
-- and space in the WHERE), reads the clock only as
-- coalesce(sqlc.narg('now'), now()), and writes the attempt before its
-- outbox row. repo/start.go runs these statements.

-- name: Start :one
-- Inserts the attempt and its outbox row, or returns the document version's
-- live attempt (the caller compares ids to tell). Returns no row when the
-- space or asset version is missing, the base head revision is stale, or a
-- concurrent Start won the active slot after this statement's snapshot: the
-- caller then runs StartPreconditions to say which.
--
-- The live attempt is not looked up before the insert: the active-slot
-- unique index is the existence test. ON CONFLICT DO NOTHING probes it
-- (and waits for an uncommitted Start of the same version), so a version
-- with a live attempt inserts nothing, and only then does the last branch
-- read that attempt. A Start that creates its attempt reads no attempt row
-- at all.
WITH eligible AS (
  SELECT 1
    FROM knowledge_spaces ks
    JOIN document_assets da
      ON da.knowledge_space_id = ks.id
   WHERE ks.id = @knowledge_space_id
     AND ks.tenant_id = @tenant_id
     AND da.id = @document_asset_id
     AND da.version = @document_version
     AND coalesce((
           SELECT h.head_revision
             FROM projection_set_publication_heads h
            WHERE h.tenant_id = @tenant_id
              AND h.knowledge_space_id = @knowledge_space_id
         ), 0) = @base_head_revision::integer
),
inserted AS (
  INSERT INTO document_compilation_attempts (
    id, tenant_id, knowledge_space_id, document_asset_id, document_version,
    publication_generation_id, base_head_revision, checkpoint, run_state,
    active_slot, execution_attempts, max_execution_attempts, row_version,
    created_at, updated_at
  )
  SELECT @id, @tenant_id, @knowledge_space_id, @document_asset_id, @document_version,
         @publication_generation_id, @base_head_revision::integer, 'queued', 'dispatch_pending',
         1, 0, @max_execution_attempts::integer, 0,
         coalesce(sqlc.narg('now')::timestamptz, now()),
         coalesce(sqlc.narg('now')::timestamptz, now())
    FROM eligible
  -- The version's live attempt, committed before this statement or by a
  -- concurrent Start after its snapshot: do nothing rather than fail, so a
  -- caller's own transaction is not aborted.
  ON CONFLICT (tenant_id, knowledge_space_id, document_asset_id, document_version, active_slot)
    DO NOTHING
  RETURNING *
),
outbox AS (
  INSERT INTO document_compilation_outbox (
    id, attempt_id, event_type, schema_version, payload, idempotency_key,
    status, dispatch_attempts, available_at, created_at, updated_at
  )
  SELECT @outbox_id, i.id, 'document.compile', 1,
         jsonb_build_object('attemptId', i.id),
         'document.compile:' || i.id::text,
         'pending', 0,
         -- A deferred start parks the row at infinity until ReleaseDeferred.
         CASE WHEN @deferred::boolean THEN 'infinity'::timestamptz
              ELSE coalesce(sqlc.narg('available_at')::timestamptz, sqlc.narg('now')::timestamptz, now())
         END,
         i.created_at, i.created_at
    FROM inserted i
  -- No notify here: the row is visible only at the caller's commit, so
  -- migration 0007's deferred trigger decides then whether an idle relay
  -- must be woken. A deferred row (at infinity) wakes nobody.
  RETURNING id
),
-- The caller's trace context, only when given (migration 0009). Without
-- one the filter is a one-time false: the insert reads and writes no row.
trace AS (
  INSERT INTO document_compilation_trace_contexts (attempt_id, traceparent, tracestate)
  SELECT i.id, sqlc.narg('traceparent')::text, coalesce(sqlc.narg('tracestate')::text, '')
    FROM inserted i
   WHERE sqlc.narg('traceparent')::text IS NOT NULL
  RETURNING attempt_id
)
SELECT * FROM inserted
UNION ALL
-- Nothing inserted (a one-time filter: skipped when a row was): the live
-- attempt, if this statement's snapshot sees it (a space or asset that
-- does not exist, or a stale head, has none to see).
SELECT a.*
  FROM document_compilation_attempts a
 WHERE NOT EXISTS (SELECT 1 FROM inserted)
   AND a.tenant_id = @tenant_id
   AND a.knowledge_space_id = @knowledge_space_id
   AND a.document_asset_id = @document_asset_id
   AND a.document_version = @document_version
   AND a.active_slot = 1;

-- name: StartPreconditions :one
-- Explains why Start returned no row; a fresh statement, so it sees
-- a live attempt committed by a concurrent Start.
SELECT
  EXISTS (
    SELECT 1 FROM knowledge_spaces ks
     WHERE ks.id = @knowledge_space_id AND ks.tenant_id = @tenant_id
  ) AS space_exists,
  EXISTS (
    SELECT 1
      FROM knowledge_spaces ks
      JOIN document_assets da ON da.knowledge_space_id = ks.id
     WHERE ks.id = @knowledge_space_id AND ks.tenant_id = @tenant_id
       AND da.id = @document_asset_id AND da.version = @document_version
  ) AS asset_version_exists,
  coalesce((
    SELECT h.head_revision
      FROM projection_set_publication_heads h
     WHERE h.tenant_id = @tenant_id AND h.knowledge_space_id = @knowledge_space_id
  ), 0)::integer AS head_revision,
  -- The zero UUID stands for "none": attempt ids are never zero.
  coalesce((
    SELECT a.id
      FROM document_compilation_attempts a
     WHERE a.tenant_id = @tenant_id
       AND a.knowledge_space_id = @knowledge_space_id
       AND a.document_asset_id = @document_asset_id
       AND a.document_version = @document_version
       AND a.active_slot = 1
  ), '00000000-0000-0000-0000-000000000000')::uuid AS live_attempt_id;

-- name: StartMany :many
-- Start for a batch of document versions in one statement (parallel
-- arrays, distinct versions). Returns the created attempts and the live
-- attempts that already existed; a version missing from the result failed
-- a precondition and the caller explains it with Start.
WITH input AS (
  -- Set-returning functions in one SELECT list advance in lockstep.
  SELECT unnest(@ids::uuid[]) AS id,
         unnest(@outbox_ids::uuid[]) AS outbox_id,
         unnest(@tenant_ids::text[]) AS tenant_id,
         unnest(@knowledge_space_ids::uuid[]) AS knowledge_space_id,
         unnest(@document_asset_ids::uuid[]) AS document_asset_id,
         unnest(@document_versions::integer[]) AS document_version,
         unnest(@publication_generation_ids::uuid[]) AS publication_generation_id,
         unnest(@base_head_revisions::integer[]) AS base_head_revision,
         unnest(@max_execution_attempts::integer[]) AS max_execution_attempts
),
existing AS (
  SELECT a.*
    FROM document_compilation_attempts a
    JOIN input i
      ON a.tenant_id = i.tenant_id
     AND a.knowledge_space_id = i.knowledge_space_id
     AND a.document_asset_id = i.document_asset_id
     AND a.document_version = i.document_version
     AND a.active_slot = 1
),
eligible AS (
  SELECT i.*
    FROM input i
    JOIN knowledge_spaces ks
      ON ks.id = i.knowledge_space_id AND ks.tenant_id = i.tenant_id
    JOIN document_assets da
      ON da.knowledge_space_id = ks.id AND da.id = i.document_asset_id AND da.version = i.document_version
   WHERE NOT EXISTS (
           SELECT 1 FROM existing e
            WHERE e.document_asset_id = i.document_asset_id
              AND e.document_version = i.document_version
              AND e.knowledge_space_id = i.knowledge_space_id)
     AND coalesce((
           SELECT h.head_revision
             FROM projection_set_publication_heads h
            WHERE h.tenant_id = i.tenant_id
              AND h.knowledge_space_id = i.knowledge_space_id
         ), 0) = i.base_head_revision
),
inserted AS (
  INSERT INTO document_compilation_attempts (
    id, tenant_id, knowledge_space_id, document_asset_id, document_version,
    publication_generation_id, base_head_revision, checkpoint, run_state,
    active_slot, execution_attempts, max_execution_attempts, row_version,
    created_at, updated_at
  )
  SELECT e.id, e.tenant_id, e.knowledge_space_id, e.document_asset_id, e.document_version,
         e.publication_generation_id, e.base_head_revision, 'queued', 'dispatch_pending',
         1, 0, e.max_execution_attempts, 0,
         coalesce(sqlc.narg('now')::timestamptz, now()),
         coalesce(sqlc.narg('now')::timestamptz, now())
    FROM eligible e
  ON CONFLICT (tenant_id, knowledge_space_id, document_asset_id, document_version, active_slot)
    DO NOTHING
  RETURNING *
),
outbox AS (
  INSERT INTO document_compilation_outbox (
    id, attempt_id, event_type, schema_version, payload, idempotency_key,
    status, dispatch_attempts, available_at, created_at, updated_at
  )
  SELECT i.outbox_id, ins.id, 'document.compile', 1,
         jsonb_build_object('attemptId', ins.id),
         'document.compile:' || ins.id::text,
         'pending', 0, ins.created_at, ins.created_at, ins.created_at
    FROM inserted ins
    JOIN input i ON i.id = ins.id
  -- Idle relays are woken at commit (migration 0007), as for Start.
  RETURNING id
)
SELECT * FROM inserted
UNION ALL
SELECT * FROM existing;
