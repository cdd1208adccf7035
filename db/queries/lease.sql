-- Taking the lease for a delivery: AcquireLease, and FailExhausted for a
-- delivery with no execution attempts left. Both are fenced by the
-- delivery, not yet by a lease: the delivered job ids must be the
-- attempt's current ones and the attempt claimable ("-- guard:delivery"),
-- so a stale or forged delivery matches no row. What the lease holder does
-- next is worker.sql's, whose header describes the guard and block markers
-- (FailExhausted's failure is "-- block:exhausted", shared with
-- direct_delivery.sql's FetchLeases). repo/lease.go runs these statements.
--
-- AcquireLease commits asynchronously when async_commit is set (see
-- outbox_relay.sql).

-- name: AcquireLease :one
-- Takes the lease for a delivery. The delivered job ids must equal both
-- rows' ids; claimable is queued or running with an expired lease, with
-- execution attempts left. (A retry_wait attempt never matches a delivery:
-- ScheduleRetry and RetryFailed clear queue_job_id, and the MarkDispatched
-- that records the next job id moves retry_wait to queued.) The outbox row
-- follows the lease (available_at = expiry), so a lost worker is
-- redelivered by the relay.
WITH attempt AS (
  SELECT a.id
    FROM document_compilation_attempts a
   WHERE a.id = @attempt_id
     -- guard:delivery
     AND a.queue_job_id = @queue_job_id::text
     AND (sqlc.narg('external_job_id')::text IS NULL
          OR a.external_job_id = sqlc.narg('external_job_id')::text)
     AND (a.run_state = 'queued'
          OR (a.run_state = 'running'
              AND a.lease_expires_at <= coalesce(sqlc.narg('now')::timestamptz, now())))
     -- end guard
     AND a.execution_attempts < a.max_execution_attempts
     FOR UPDATE
),
outbox AS (
  SELECT o.id, o.attempt_id
    FROM document_compilation_outbox o
    JOIN attempt ON o.attempt_id = attempt.id
   WHERE o.queue_job_id = @queue_job_id::text
     AND (sqlc.narg('external_job_id')::text IS NULL
          OR o.external_job_id = sqlc.narg('external_job_id')::text)
     FOR UPDATE OF o
),
outbox_update AS (
  UPDATE document_compilation_outbox o
     SET status = 'leased',
         available_at = coalesce(sqlc.narg('now')::timestamptz, now()) + @lease_duration::interval,
         -- block:relay-lock-end
         locked_by = NULL, lock_token = NULL, locked_until = NULL,
         -- end block
         updated_at = coalesce(sqlc.narg('now')::timestamptz, now())
    FROM outbox
   WHERE o.id = outbox.id
  RETURNING o.id
)
UPDATE document_compilation_attempts a
   SET run_state = 'running',
       execution_attempts = a.execution_attempts + 1,
       worker_id = @worker_id::text,
       lease_token = gen_random_uuid(),
       lease_expires_at = coalesce(sqlc.narg('now')::timestamptz, now()) + @lease_duration::interval,
       heartbeat_at = coalesce(sqlc.narg('now')::timestamptz, now()),
       started_at = coalesce(a.started_at, coalesce(sqlc.narg('now')::timestamptz, now())),
       retry_at = NULL,
       row_version = a.row_version + 1,
       updated_at = coalesce(sqlc.narg('now')::timestamptz, now())
  FROM outbox
 WHERE a.id = outbox.attempt_id
   AND CASE WHEN @async_commit::boolean THEN set_config('synchronous_commit', 'off', true) IS NOT NULL ELSE true END
RETURNING a.*;

-- name: FailExhausted :one
-- Fails a delivered attempt that has no execution attempts left
-- (EXECUTION_ATTEMPTS_EXHAUSTED). Same delivery fence and claimable states
-- as AcquireLease: queued, or running once its lease expired (no other
-- live state has a job id to match).
WITH attempt AS (
  SELECT a.id
    FROM document_compilation_attempts a
   WHERE a.id = @attempt_id
     -- guard:delivery
     AND a.queue_job_id = @queue_job_id::text
     AND (sqlc.narg('external_job_id')::text IS NULL
          OR a.external_job_id = sqlc.narg('external_job_id')::text)
     AND (a.run_state = 'queued'
          OR (a.run_state = 'running'
              AND a.lease_expires_at <= coalesce(sqlc.narg('now')::timestamptz, now())))
     -- end guard
     AND a.execution_attempts >= a.max_execution_attempts
     FOR UPDATE
),
outbox AS (
  UPDATE document_compilation_outbox o
     SET status = 'dead',
         -- block:relay-lock-end
         locked_by = NULL, lock_token = NULL, locked_until = NULL,
         -- end block
         updated_at = coalesce(sqlc.narg('now')::timestamptz, now())
    FROM attempt
   WHERE o.attempt_id = attempt.id
  RETURNING o.id
)
UPDATE document_compilation_attempts a
   -- block:exhausted
   -- block:failed
   SET run_state = 'failed',
       active_slot = NULL,
       completed_at = coalesce(sqlc.narg('now')::timestamptz, now()),
       -- block:lease-end
       worker_id = NULL, lease_token = NULL, lease_expires_at = NULL, heartbeat_at = NULL,
       -- end block
       retry_at = NULL,
   -- end block
       last_error_code = 'EXECUTION_ATTEMPTS_EXHAUSTED',
       last_error_message = 'execution attempts exhausted (' || a.execution_attempts || ' of ' || a.max_execution_attempts || ')',
       row_version = a.row_version + 1,
       updated_at = coalesce(sqlc.narg('now')::timestamptz, now())
   -- end block
  FROM attempt
 WHERE a.id = attempt.id
RETURNING a.*;
