-- Control-plane transitions of an existing attempt: ReleaseDeferred,
-- EndAttempt (Cancel and Supersede) and RetryFailed. Every statement is
-- tenant-scoped (tenant and space in the WHERE), reads the clock only as
-- coalesce(sqlc.narg('now'), now()), and locks the attempt before its
-- outbox row: the outbox is only ever reached through a CTE that has
-- already locked the attempt.
--
-- They share the control guard, between "-- guard:control" and
-- "-- end guard": the tenant and space, and the expected row version when
-- one is given. EndAttempt and RetryFailed clear the lease columns with
-- the "-- block:lease-end" SET list and the relay lock with
-- "-- block:relay-lock-end" ("-- end block"). repo/guards_test.go checks
-- every copy against one canonical text (worker.sql's header describes
-- the markers). repo/control.go runs these statements.

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
         -- block:relay-lock-end
         locked_by = NULL, lock_token = NULL, locked_until = NULL,
         -- end block
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
         -- block:relay-lock-end
         locked_by = NULL, lock_token = NULL, locked_until = NULL,
         -- end block
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
