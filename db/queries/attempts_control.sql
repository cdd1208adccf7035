-- Control-plane transitions of document_compilation_attempts. Every statement
-- is tenant-scoped (tenant and space in the WHERE), reads the clock only as
-- coalesce(sqlc.narg('now'), now()), and locks the attempt before its outbox
-- row: the outbox is only ever reached through a CTE that has already locked
-- or written the attempt.
--
-- The transitions on an existing attempt (ReleaseDeferred, EndAttempt,
-- RetryFailed) share the control guard, between "-- guard:control" and
-- "-- end guard": the tenant and space, and the expected row version when
-- one is given. EndAttempt and RetryFailed clear the lease columns with the
-- "-- block:lease-end" SET list ("-- end block"). repo/guards_test.go
-- checks every copy against one canonical text (worker.sql's header
-- describes the markers).

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

-- name: ReleaseDeferred :one
-- Makes a deferred start's outbox row due now. Guards: the attempt is still
-- dispatch_pending and its outbox row is parked at infinity.
WITH attempt AS (
  SELECT a.id
    FROM document_compilation_attempts a
   WHERE a.id = @attempt_id
     -- guard:control
     AND a.tenant_id = @tenant_id
     AND a.knowledge_space_id = @knowledge_space_id
     AND (sqlc.narg('expected_row_version')::integer IS NULL
          OR a.row_version = sqlc.narg('expected_row_version')::integer)
     -- end guard
     AND a.run_state = 'dispatch_pending'
     FOR UPDATE
),
outbox AS (
  SELECT o.id, o.attempt_id
    FROM document_compilation_outbox o
    JOIN attempt ON o.attempt_id = attempt.id
   WHERE o.status = 'pending'
     AND o.available_at = 'infinity'::timestamptz
     FOR UPDATE OF o
),
released AS (
  UPDATE document_compilation_outbox o
     SET available_at = coalesce(sqlc.narg('now')::timestamptz, now()),
         updated_at = coalesce(sqlc.narg('now')::timestamptz, now())
    FROM outbox
   WHERE o.id = outbox.id
  RETURNING o.id
)
UPDATE document_compilation_attempts a
   SET row_version = a.row_version + 1,
       updated_at = coalesce(sqlc.narg('now')::timestamptz, now())
  FROM outbox
 WHERE a.id = outbox.attempt_id
RETURNING a.*;

-- name: EndAttempt :one
-- Cancel and Supersede: any live state -> run_state (canceled, or
-- superseded when a newer version made the attempt moot); the outbox row
-- -> canceled either way, its relay lock dropped (a relay still publishing
-- it then fails its token check). With a reason, the error code is
-- error_code (CANCELED or SUPERSEDED) and the message the reason.
WITH attempt AS (
  SELECT a.id
    FROM document_compilation_attempts a
   WHERE a.id = @attempt_id
     -- guard:control
     AND a.tenant_id = @tenant_id
     AND a.knowledge_space_id = @knowledge_space_id
     AND (sqlc.narg('expected_row_version')::integer IS NULL
          OR a.row_version = sqlc.narg('expected_row_version')::integer)
     -- end guard
     AND a.active_slot = 1
     AND @run_state::varchar IN ('canceled', 'superseded')
     FOR UPDATE
),
outbox AS (
  UPDATE document_compilation_outbox o
     SET status = 'canceled',
         locked_by = NULL, lock_token = NULL, locked_until = NULL,
         updated_at = coalesce(sqlc.narg('now')::timestamptz, now())
    FROM attempt
   WHERE o.attempt_id = attempt.id
  RETURNING o.id
)
UPDATE document_compilation_attempts a
   SET run_state = @run_state::varchar,
       active_slot = NULL,
       completed_at = coalesce(sqlc.narg('now')::timestamptz, now()),
       -- block:lease-end
       worker_id = NULL, lease_token = NULL, lease_expires_at = NULL, heartbeat_at = NULL,
       -- end block
       retry_at = NULL,
       last_error_code = CASE WHEN sqlc.narg('reason')::text IS NULL THEN a.last_error_code ELSE @error_code::text END,
       last_error_message = coalesce(sqlc.narg('reason')::text, a.last_error_message),
       row_version = a.row_version + 1,
       updated_at = coalesce(sqlc.narg('now')::timestamptz, now())
  FROM attempt
 WHERE a.id = attempt.id
RETURNING a.*;

-- name: RetryFailed :one
-- Reactivates a failed attempt in place: same row, checkpoint and candidate
-- kept so work resumes. The NOT EXISTS keeps the common case error-free; a
-- Start racing past it hits the active-slot unique index (23505), which the
-- caller maps to "live attempt exists".
WITH attempt AS (
  SELECT a.id
    FROM document_compilation_attempts a
   WHERE a.id = @attempt_id
     -- guard:control
     AND a.tenant_id = @tenant_id
     AND a.knowledge_space_id = @knowledge_space_id
     AND (sqlc.narg('expected_row_version')::integer IS NULL
          OR a.row_version = sqlc.narg('expected_row_version')::integer)
     -- end guard
     AND a.run_state = 'failed'
     AND NOT EXISTS (
       SELECT 1
         FROM document_compilation_attempts live
        WHERE live.tenant_id = a.tenant_id
          AND live.knowledge_space_id = a.knowledge_space_id
          AND live.document_asset_id = a.document_asset_id
          AND live.document_version = a.document_version
          AND live.active_slot = 1
     )
     FOR UPDATE
),
outbox AS (
  UPDATE document_compilation_outbox o
     SET status = 'pending',
         dispatch_attempts = 0,
         available_at = coalesce(sqlc.narg('now')::timestamptz, now()),
         queue_job_id = NULL, external_job_id = NULL, delivered_at = NULL, last_error = NULL,
         locked_by = NULL, lock_token = NULL, locked_until = NULL,
         updated_at = coalesce(sqlc.narg('now')::timestamptz, now())
    FROM attempt
   WHERE o.attempt_id = attempt.id
  RETURNING o.id
)
UPDATE document_compilation_attempts a
   SET run_state = 'dispatch_pending',
       active_slot = 1,
       execution_attempts = 0,
       completed_at = NULL, started_at = NULL,
       last_error_code = NULL, last_error_message = NULL,
       -- block:lease-end
       worker_id = NULL, lease_token = NULL, lease_expires_at = NULL, heartbeat_at = NULL,
       -- end block
       queue_job_id = NULL, external_job_id = NULL, retry_at = NULL,
       row_version = a.row_version + 1,
       updated_at = coalesce(sqlc.narg('now')::timestamptz, now())
  FROM attempt
 WHERE a.id = attempt.id
RETURNING a.*;

-- name: Purge :many
-- Retention: deletes up to batch_size terminal attempts of one tenant that
-- completed before the cut-off, oldest first (tenant_completed_idx). SKIP
-- LOCKED leaves rows a concurrent transition holds; outbox rows go by
-- cascade, after their attempt.
WITH doomed AS (
  SELECT a.id
    FROM document_compilation_attempts a
   WHERE a.tenant_id = @tenant_id
     AND a.completed_at < @completed_before::timestamptz
   ORDER BY a.completed_at, a.id
   LIMIT @batch_size::integer
     FOR UPDATE SKIP LOCKED
)
DELETE FROM document_compilation_attempts a
 USING doomed
 WHERE a.id = doomed.id
RETURNING a.id;

-- name: PurgeTenants :many
-- The tenants an all-tenants purge walks: those with a terminal attempt
-- completed before the cut-off, after after_tenant in tenant_id order, at
-- most row_limit. A loose index scan of tenant_completed_idx from
-- after_tenant (one probe per tenant to find the next, one to read its
-- oldest completion: min() is the first non-null completed_at of the
-- tenant's range of tenant_completed_idx; an EXISTS on completed_at < cut-off
-- was planned on any index leading with tenant_id, filtering, which reads
-- a whole tenant with no old attempt), so the cost grows with the tenants,
-- not with the history. The walk yields tenants in ascending order and the LIMIT stops
-- it, so a page is a prefix.
WITH RECURSIVE walk (tenant_id) AS (
  SELECT @after_tenant::text
  UNION ALL
  SELECT next.tenant_id
    FROM walk w
   CROSS JOIN LATERAL (SELECT a.tenant_id::text AS tenant_id
                         FROM document_compilation_attempts a
                        WHERE a.tenant_id > w.tenant_id
                        ORDER BY a.tenant_id
                        LIMIT 1) next
)
SELECT w.tenant_id::text AS tenant_id
  FROM walk w
 WHERE w.tenant_id > @after_tenant::text
   AND (SELECT min(a.completed_at)
          FROM document_compilation_attempts a
         WHERE a.tenant_id = w.tenant_id) < @completed_before::timestamptz
 LIMIT @row_limit::integer;
