-- The lease holder's transitions, each fenced by the lease (attempt id,
-- running, same token and worker, not yet expired, and the outbox row still
-- leased): Heartbeat, Advance (and AdvanceTo), Complete, CompleteThrough,
-- Fail, ScheduleRetry and CompleteMany. A stale worker matches no row and
-- can never write. Taking the lease (AcquireLease, fenced by the delivery)
-- is lease.sql's.
--
-- Guards are the same lines in every statement that needs them, marked
-- "-- guard:NAME" to "-- end guard": the lease guard ("-- guard:lease"),
-- the candidate guard ("-- guard:candidate"), and in the other files the
-- delivery fence ("-- guard:delivery", lease.sql), the control guard
-- ("-- guard:control", control.sql) and the awaiting-delivery
-- guard ("-- guard:awaiting-delivery", outbox_relay.sql). Repeated SET
-- lists are marked the same way as blocks, "-- block:NAME" to
-- "-- end block" (a block may hold another):
--   lease-end       the columns a lease's end clears, in every statement
--                   that moves an attempt out of running other than by a
--                   new lease;
--   relay-lock-end  the relay lock's end, in every outbox write that moves
--                   a row to another status;
--   succeeded       the success (Complete, CompleteThrough, CompleteMany);
--   failed          the failure, in every statement that fails an attempt;
--   exhausted       the exhausted attempt's failure (FailExhausted in
--                   lease.sql, FetchLeases in direct_delivery.sql).
-- repo/guards_test.go checks every copy against one canonical text and
-- that no statement that needs a guard or block lacks it.
--
-- The lease guard reads the outbox row as well as the
-- attempt: once the relay's ClaimOutbox has reclaimed the leased row at the
-- lease's expiry (status dispatching), the lease is lost, even to a
-- statement whose clock is still before the expiry (its transaction began
-- earlier, or it waited on a lock). Each statement locks both rows with
-- FOR UPDATE OF a, o: per row the attempt first, then its outbox row, the
-- order every transition keeps. Under READ COMMITTED a row that changed
-- while the statement waited for its lock is re-checked in its newest
-- version, join condition and guard included, so a claim that committed
-- meanwhile is seen; and a locked outbox row is skipped by the relay's
-- claim (SKIP LOCKED) until the statement's transaction ends.
--
-- Heartbeat and Advance commit asynchronously when async_commit is set
-- (see outbox_relay.sql).

-- name: Heartbeat :one
-- Extends a live lease; the leased outbox row's redelivery time follows.
WITH attempt AS (
  SELECT a.id, o.id AS outbox_id
    FROM document_compilation_attempts a
    JOIN document_compilation_outbox o ON o.attempt_id = a.id
   WHERE a.id = @attempt_id
     -- guard:lease
     AND a.run_state = 'running'
     AND a.lease_token = @lease_token::uuid
     AND a.worker_id = @worker_id::text
     AND a.lease_expires_at > coalesce(sqlc.narg('now')::timestamptz, now())
     AND o.status = 'leased'
     -- end guard
     FOR UPDATE OF a, o
),
outbox AS (
  UPDATE document_compilation_outbox o
     SET available_at = coalesce(sqlc.narg('now')::timestamptz, now()) + @lease_duration::interval,
         updated_at = coalesce(sqlc.narg('now')::timestamptz, now())
    FROM attempt
   WHERE o.id = attempt.outbox_id
  RETURNING o.id
)
UPDATE document_compilation_attempts a
   SET lease_expires_at = coalesce(sqlc.narg('now')::timestamptz, now()) + @lease_duration::interval,
       heartbeat_at = coalesce(sqlc.narg('now')::timestamptz, now()),
       row_version = a.row_version + 1,
       updated_at = coalesce(sqlc.narg('now')::timestamptz, now())
  FROM attempt
 WHERE a.id = attempt.id
   AND CASE WHEN @async_commit::boolean THEN set_config('synchronous_commit', 'off', true) IS NOT NULL ELSE true END
RETURNING a.*;

-- name: Advance :one
-- Keeps the checkpoint or moves it forward at most max_steps steps (1 for
-- Advance, any number for AdvanceTo: the same as that many one-step calls
-- in one transaction), never to published: that is Complete, and the
-- order below stops before it. Binds the candidate publication once: it
-- must be a 'candidate' publication of the attempt's own tenant and space;
-- binding the same one again is a no-op, another one is refused.
-- projection_built and later need a bound candidate, bound here at the
-- latest. Writes no outbox row (the lease guard locks it).
WITH attempt AS (
  SELECT a.id, o.id AS outbox_id
    FROM document_compilation_attempts a
    JOIN document_compilation_outbox o ON o.attempt_id = a.id
   WHERE a.id = @attempt_id
     -- guard:lease
     AND a.run_state = 'running'
     AND a.lease_token = @lease_token::uuid
     AND a.worker_id = @worker_id::text
     AND a.lease_expires_at > coalesce(sqlc.narg('now')::timestamptz, now())
     AND o.status = 'leased'
     -- end guard
     -- The checkpoint order, published left out: a checkpoint not in it
     -- has no position, and the comparison is then NULL (refused).
     AND array_position('{queued,parsed,outline_built,nodes_generated,projection_built,smoke_eval_passed}'::varchar[], @checkpoint::varchar)
         - array_position('{queued,parsed,outline_built,nodes_generated,projection_built,smoke_eval_passed}'::varchar[], a.checkpoint)
         BETWEEN 0 AND @max_steps::integer
     -- guard:candidate
     AND (sqlc.narg('candidate_publication_id')::uuid IS NULL
          OR (a.candidate_publication_id IS NULL
              AND EXISTS (
                SELECT 1
                  FROM projection_set_publications p
                 WHERE p.tenant_id = a.tenant_id
                   AND p.knowledge_space_id = a.knowledge_space_id
                   AND p.id = sqlc.narg('candidate_publication_id')::uuid
                   AND p.fingerprint = sqlc.narg('candidate_fingerprint')::varchar
                   AND p.status = 'candidate'))
          OR (a.candidate_publication_id = sqlc.narg('candidate_publication_id')::uuid
              AND a.candidate_fingerprint = sqlc.narg('candidate_fingerprint')::varchar))
     -- end guard
     AND (@checkpoint::varchar NOT IN ('projection_built', 'smoke_eval_passed')
          OR coalesce(a.candidate_publication_id, sqlc.narg('candidate_publication_id')::uuid) IS NOT NULL)
     FOR UPDATE OF a, o
)
UPDATE document_compilation_attempts a
   SET checkpoint = @checkpoint::varchar,
       candidate_publication_id = coalesce(a.candidate_publication_id, sqlc.narg('candidate_publication_id')::uuid),
       candidate_fingerprint = coalesce(a.candidate_fingerprint, sqlc.narg('candidate_fingerprint')::varchar),
       row_version = a.row_version + 1,
       updated_at = coalesce(sqlc.narg('now')::timestamptz, now())
  FROM attempt
 WHERE a.id = attempt.id
   AND CASE WHEN @async_commit::boolean THEN set_config('synchronous_commit', 'off', true) IS NOT NULL ELSE true END
RETURNING a.*;

-- name: Complete :one
-- smoke_eval_passed -> succeeded at checkpoint published; outbox completed.
WITH attempt AS (
  SELECT a.id, o.id AS outbox_id
    FROM document_compilation_attempts a
    JOIN document_compilation_outbox o ON o.attempt_id = a.id
   WHERE a.id = @attempt_id
     -- guard:lease
     AND a.run_state = 'running'
     AND a.lease_token = @lease_token::uuid
     AND a.worker_id = @worker_id::text
     AND a.lease_expires_at > coalesce(sqlc.narg('now')::timestamptz, now())
     AND o.status = 'leased'
     -- end guard
     AND a.checkpoint = 'smoke_eval_passed'
     FOR UPDATE OF a, o
),
outbox AS (
  UPDATE document_compilation_outbox o
     SET status = 'completed',
         -- block:relay-lock-end
         locked_by = NULL, lock_token = NULL, locked_until = NULL,
         -- end block
         updated_at = coalesce(sqlc.narg('now')::timestamptz, now())
    FROM attempt
   WHERE o.id = attempt.outbox_id
  RETURNING o.id
)
UPDATE document_compilation_attempts a
   -- block:succeeded
   SET run_state = 'succeeded',
       checkpoint = 'published',
       active_slot = NULL,
       completed_at = coalesce(sqlc.narg('now')::timestamptz, now()),
       -- block:lease-end
       worker_id = NULL, lease_token = NULL, lease_expires_at = NULL, heartbeat_at = NULL,
       -- end block
       retry_at = NULL,
   -- end block
       row_version = a.row_version + 1,
       updated_at = coalesce(sqlc.narg('now')::timestamptz, now())
  FROM attempt
 WHERE a.id = attempt.id
RETURNING a.*;

-- name: CompleteThrough :one
-- AdvanceTo smoke_eval_passed and Complete in one statement: from any
-- checkpoint to succeeded at published, binding the candidate when none is
-- bound (projection_built is on the way, so one must be bound or given).
WITH attempt AS (
  SELECT a.id, o.id AS outbox_id
    FROM document_compilation_attempts a
    JOIN document_compilation_outbox o ON o.attempt_id = a.id
   WHERE a.id = @attempt_id
     -- guard:lease
     AND a.run_state = 'running'
     AND a.lease_token = @lease_token::uuid
     AND a.worker_id = @worker_id::text
     AND a.lease_expires_at > coalesce(sqlc.narg('now')::timestamptz, now())
     AND o.status = 'leased'
     -- end guard
     AND a.checkpoint <> 'published'
     -- guard:candidate
     AND (sqlc.narg('candidate_publication_id')::uuid IS NULL
          OR (a.candidate_publication_id IS NULL
              AND EXISTS (
                SELECT 1
                  FROM projection_set_publications p
                 WHERE p.tenant_id = a.tenant_id
                   AND p.knowledge_space_id = a.knowledge_space_id
                   AND p.id = sqlc.narg('candidate_publication_id')::uuid
                   AND p.fingerprint = sqlc.narg('candidate_fingerprint')::varchar
                   AND p.status = 'candidate'))
          OR (a.candidate_publication_id = sqlc.narg('candidate_publication_id')::uuid
              AND a.candidate_fingerprint = sqlc.narg('candidate_fingerprint')::varchar))
     -- end guard
     AND coalesce(a.candidate_publication_id, sqlc.narg('candidate_publication_id')::uuid) IS NOT NULL
     FOR UPDATE OF a, o
),
outbox AS (
  UPDATE document_compilation_outbox o
     SET status = 'completed',
         -- block:relay-lock-end
         locked_by = NULL, lock_token = NULL, locked_until = NULL,
         -- end block
         updated_at = coalesce(sqlc.narg('now')::timestamptz, now())
    FROM attempt
   WHERE o.id = attempt.outbox_id
  RETURNING o.id
)
UPDATE document_compilation_attempts a
   -- block:succeeded
   SET run_state = 'succeeded',
       checkpoint = 'published',
       active_slot = NULL,
       completed_at = coalesce(sqlc.narg('now')::timestamptz, now()),
       -- block:lease-end
       worker_id = NULL, lease_token = NULL, lease_expires_at = NULL, heartbeat_at = NULL,
       -- end block
       retry_at = NULL,
   -- end block
       candidate_publication_id = coalesce(a.candidate_publication_id, sqlc.narg('candidate_publication_id')::uuid),
       candidate_fingerprint = coalesce(a.candidate_fingerprint, sqlc.narg('candidate_fingerprint')::varchar),
       row_version = a.row_version + 1,
       updated_at = coalesce(sqlc.narg('now')::timestamptz, now())
  FROM attempt
 WHERE a.id = attempt.id
RETURNING a.*;

-- name: Fail :one
-- The lease holder gives up: failed with its error code; outbox dead.
WITH attempt AS (
  SELECT a.id, o.id AS outbox_id
    FROM document_compilation_attempts a
    JOIN document_compilation_outbox o ON o.attempt_id = a.id
   WHERE a.id = @attempt_id
     -- guard:lease
     AND a.run_state = 'running'
     AND a.lease_token = @lease_token::uuid
     AND a.worker_id = @worker_id::text
     AND a.lease_expires_at > coalesce(sqlc.narg('now')::timestamptz, now())
     AND o.status = 'leased'
     -- end guard
     FOR UPDATE OF a, o
),
outbox AS (
  UPDATE document_compilation_outbox o
     SET status = 'dead',
         -- block:relay-lock-end
         locked_by = NULL, lock_token = NULL, locked_until = NULL,
         -- end block
         updated_at = coalesce(sqlc.narg('now')::timestamptz, now())
    FROM attempt
   WHERE o.id = attempt.outbox_id
  RETURNING o.id
)
UPDATE document_compilation_attempts a
   -- block:failed
   SET run_state = 'failed',
       active_slot = NULL,
       completed_at = coalesce(sqlc.narg('now')::timestamptz, now()),
       -- block:lease-end
       worker_id = NULL, lease_token = NULL, lease_expires_at = NULL, heartbeat_at = NULL,
       -- end block
       retry_at = NULL,
   -- end block
       last_error_code = @error_code::text,
       last_error_message = @error_message::text,
       row_version = a.row_version + 1,
       updated_at = coalesce(sqlc.narg('now')::timestamptz, now())
  FROM attempt
 WHERE a.id = attempt.id
RETURNING a.*;

-- name: ScheduleRetry :one
-- The lease holder asks for another execution after retry_delay (so
-- retry_at > now always): retry_wait, lease and job ids cleared; the outbox
-- row becomes due again at retry_at with a fresh dispatch budget (an idle
-- relay is told at commit, by migration 0007's trigger, to set its timer).
WITH attempt AS (
  SELECT a.id, o.id AS outbox_id
    FROM document_compilation_attempts a
    JOIN document_compilation_outbox o ON o.attempt_id = a.id
   WHERE a.id = @attempt_id
     -- guard:lease
     AND a.run_state = 'running'
     AND a.lease_token = @lease_token::uuid
     AND a.worker_id = @worker_id::text
     AND a.lease_expires_at > coalesce(sqlc.narg('now')::timestamptz, now())
     AND o.status = 'leased'
     -- end guard
     AND a.execution_attempts < a.max_execution_attempts
     FOR UPDATE OF a, o
),
outbox AS (
  UPDATE document_compilation_outbox o
     SET status = 'pending',
         available_at = coalesce(sqlc.narg('now')::timestamptz, now()) + @retry_delay::interval,
         dispatch_attempts = 0,
         delivered_at = NULL, queue_job_id = NULL, external_job_id = NULL,
         -- block:relay-lock-end
         locked_by = NULL, lock_token = NULL, locked_until = NULL,
         -- end block
         updated_at = coalesce(sqlc.narg('now')::timestamptz, now())
    FROM attempt
   WHERE o.id = attempt.outbox_id
  RETURNING o.id
)
UPDATE document_compilation_attempts a
   SET run_state = 'retry_wait',
       retry_at = coalesce(sqlc.narg('now')::timestamptz, now()) + @retry_delay::interval,
       last_error_code = @error_code::text,
       last_error_message = @error_message::text,
       -- block:lease-end
       worker_id = NULL, lease_token = NULL, lease_expires_at = NULL, heartbeat_at = NULL,
       -- end block
       queue_job_id = NULL, external_job_id = NULL,
       row_version = a.row_version + 1,
       updated_at = coalesce(sqlc.narg('now')::timestamptz, now())
  FROM attempt
 WHERE a.id = attempt.id
RETURNING a.*;

-- name: CompleteMany :many
-- Complete (through = false) or CompleteThrough (through = true) for a
-- batch of leases, one statement for the lot: the worker's completer sends
-- what its slots finished meanwhile. Parallel arrays: entry k is
-- attempt_ids[k], lease_tokens[k], worker_ids[k], through[k] and the
-- candidate (an all-zero id and an empty fingerprint: none given). Rows are
-- found by id = ANY, not by joining an unnest, so the plan stays on the
-- primary key even on a near-empty table's statistics. Each row has its
-- transition's guard; a lease that fails it is left out of the result (the
-- caller asks Complete or CompleteThrough why). Attempt ids must be
-- distinct. Rows are locked in attempt id order, each attempt and then its
-- outbox row.
WITH attempt AS (
  SELECT a.id, o.id AS outbox_id, input.candidate_publication_id, input.candidate_fingerprint
    FROM document_compilation_attempts a
    JOIN document_compilation_outbox o ON o.attempt_id = a.id
   CROSS JOIN LATERAL (
     SELECT (@lease_tokens::uuid[])[k] AS lease_token,
            (@worker_ids::text[])[k] AS worker_id,
            (@through::boolean[])[k] AS through,
            nullif((@candidate_publication_ids::uuid[])[k], '00000000-0000-0000-0000-000000000000') AS candidate_publication_id,
            nullif((@candidate_fingerprints::text[])[k], '') AS candidate_fingerprint
       FROM array_position(@attempt_ids::uuid[], a.id) AS k
   ) input
   WHERE a.id = ANY(@attempt_ids::uuid[])
     -- guard:lease batch
     AND a.run_state = 'running'
     AND a.lease_token = input.lease_token
     AND a.worker_id = input.worker_id
     AND a.lease_expires_at > coalesce(sqlc.narg('now')::timestamptz, now())
     AND o.status = 'leased'
     -- end guard
     AND (a.checkpoint = 'smoke_eval_passed'
          OR (input.through
              AND a.checkpoint <> 'published'
              AND coalesce(a.candidate_publication_id, input.candidate_publication_id) IS NOT NULL))
     -- A candidate is given only with through (repo checks it too).
     AND (input.candidate_publication_id IS NULL OR input.through)
     -- guard:candidate batch
     AND (input.candidate_publication_id IS NULL
          OR (a.candidate_publication_id IS NULL
              AND EXISTS (
                SELECT 1
                  FROM projection_set_publications p
                 WHERE p.tenant_id = a.tenant_id
                   AND p.knowledge_space_id = a.knowledge_space_id
                   AND p.id = input.candidate_publication_id
                   AND p.fingerprint = input.candidate_fingerprint
                   AND p.status = 'candidate'))
          OR (a.candidate_publication_id = input.candidate_publication_id
              AND a.candidate_fingerprint = input.candidate_fingerprint))
     -- end guard
   ORDER BY a.id
     FOR UPDATE OF a, o
),
outbox AS (
  UPDATE document_compilation_outbox o
     SET status = 'completed',
         -- block:relay-lock-end
         locked_by = NULL, lock_token = NULL, locked_until = NULL,
         -- end block
         updated_at = coalesce(sqlc.narg('now')::timestamptz, now())
    FROM attempt
   WHERE o.id = attempt.outbox_id
  RETURNING o.id
)
UPDATE document_compilation_attempts a
   -- block:succeeded
   SET run_state = 'succeeded',
       checkpoint = 'published',
       active_slot = NULL,
       completed_at = coalesce(sqlc.narg('now')::timestamptz, now()),
       -- block:lease-end
       worker_id = NULL, lease_token = NULL, lease_expires_at = NULL, heartbeat_at = NULL,
       -- end block
       retry_at = NULL,
   -- end block
       candidate_publication_id = coalesce(a.candidate_publication_id, attempt.candidate_publication_id),
       candidate_fingerprint = coalesce(a.candidate_fingerprint, attempt.candidate_fingerprint),
       row_version = a.row_version + 1,
       updated_at = coalesce(sqlc.narg('now')::timestamptz, now())
  FROM attempt
 WHERE a.id = attempt.id
RETURNING a.*;
