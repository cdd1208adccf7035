-- Relay operations on document_compilation_outbox. A claim takes outbox rows
-- only (SKIP LOCKED, never waiting, holding no attempt lock); MarkDispatched
-- and ReleaseOutbox lock the attempt first, then the outbox row, and are
-- fenced by the claim's lock_token.

-- MarkDispatched and ReleaseOutbox's dead-letter share the awaiting-delivery
-- guard (between "-- guard:awaiting-delivery" and "-- end guard"): the
-- attempt waits for a delivery when it is dispatch_pending, retry_wait,
-- queued, or running with an expired lease (repo/guards_test.go checks
-- the copies agree). ReleaseOutbox's dead-letter clears the lease columns
-- with the "-- block:lease-end" SET list (worker.sql's header describes
-- the markers).

-- ClaimOutbox, MarkDispatched and the worker's AcquireLease, Heartbeat,
-- Advance and AdvanceTo are progress, not outcomes: with async_commit
-- (repo.Config.AsyncProgressCommits) they make their transaction's commit
-- asynchronous (set_config(..., true) lasts until the transaction ends).
-- One lost to a database crash is redone as if its relay or worker had
-- been lost; Start and every outcome stay synchronous.

-- name: ClaimOutbox :many
-- Claims up to batch_size due rows, oldest due first: rows waiting to be
-- (re)published (delivery_due_idx) and rows whose relay lock expired
-- (lock_recovery_idx). Each claimed row gets its own random lock token.
-- A claim that found rows also ends the relay's idle registration
-- (OutboxListenerIdle), so commits stop notifying while it is busy.
WITH due AS (
  SELECT o.id
    FROM document_compilation_outbox o
   WHERE (o.status IN ('pending', 'dispatched', 'leased')
          AND o.available_at <= coalesce(sqlc.narg('now')::timestamptz, now()))
      OR (o.status = 'dispatching'
          AND o.locked_until <= coalesce(sqlc.narg('now')::timestamptz, now()))
   ORDER BY o.available_at, o.created_at, o.id
   LIMIT @batch_size::integer
     FOR UPDATE SKIP LOCKED
),
awake AS (
  DELETE FROM document_compilation_outbox_idle_listeners l
   WHERE l.listener_id = @relay_id::text
     AND EXISTS (SELECT 1 FROM due)
)
UPDATE document_compilation_outbox o
   SET status = 'dispatching',
       dispatch_attempts = o.dispatch_attempts + 1,
       locked_by = @relay_id::text,
       lock_token = gen_random_uuid(),
       locked_until = coalesce(sqlc.narg('now')::timestamptz, now()) + @lock_duration::interval,
       updated_at = coalesce(sqlc.narg('now')::timestamptz, now())
  FROM due
 WHERE o.id = due.id
   AND CASE WHEN @async_commit::boolean THEN set_config('synchronous_commit', 'off', true) IS NOT NULL ELSE true END
RETURNING o.*;

-- name: OutboxListenerIdle :one
-- A relay found nothing to claim and is about to sleep on LISTEN: register
-- it idle, so that commits making a row due notify it (migration 0007).
-- Refreshing an existing registration needs no lock: it has been in place
-- since its relay last claimed. A new one takes the wake-up lock
-- exclusively without waiting; when a commit is checking (it holds the
-- lock shared) the registration is refused (registered = false) and the
-- relay polls again shortly instead. After a new registration (inserted)
-- the relay must look once more before it sleeps: a commit that checked
-- before the registration is visible to any statement begun after it
-- committed, such as this one again (now a refresh: its next_due_in says
-- whether to claim) or a claim. Also deletes other
-- relays' expired registrations, and returns how long until the next row
-- becomes due, in microseconds (zero or less: one is due now;
-- has_next_due false: none will), read from the heads of delivery_due_idx
-- and lock_recovery_idx.
WITH refreshed AS (
  UPDATE document_compilation_outbox_idle_listeners l
     SET expires_at = coalesce(sqlc.narg('now')::timestamptz, now()) + @ttl::interval
   WHERE l.listener_id = @listener_id::text
  RETURNING l.listener_id
),
inserted AS (
  INSERT INTO document_compilation_outbox_idle_listeners (listener_id, expires_at)
  SELECT @listener_id::text, coalesce(sqlc.narg('now')::timestamptz, now()) + @ttl::interval
   WHERE CASE WHEN EXISTS (SELECT 1 FROM refreshed) THEN false
              ELSE pg_try_advisory_xact_lock(1801876324, 1) END
  ON CONFLICT (listener_id) DO NOTHING
  RETURNING listener_id
),
expired AS (
  DELETE FROM document_compilation_outbox_idle_listeners l
   WHERE l.expires_at < coalesce(sqlc.narg('now')::timestamptz, now())
     AND l.listener_id <> @listener_id::text
),
next_due AS (
  SELECT min(heads.due_at) AS due_at
    FROM ((SELECT o.available_at AS due_at FROM document_compilation_outbox o
            WHERE o.status = 'pending' AND o.available_at < 'infinity'
            ORDER BY o.available_at LIMIT 1)
          UNION ALL
          (SELECT o.available_at FROM document_compilation_outbox o
            WHERE o.status = 'dispatched' ORDER BY o.available_at LIMIT 1)
          UNION ALL
          (SELECT o.available_at FROM document_compilation_outbox o
            WHERE o.status = 'leased' ORDER BY o.available_at LIMIT 1)
          UNION ALL
          (SELECT o.locked_until FROM document_compilation_outbox o
            WHERE o.status = 'dispatching' ORDER BY o.locked_until LIMIT 1)) heads
)
SELECT (EXISTS (SELECT 1 FROM refreshed) OR EXISTS (SELECT 1 FROM inserted))::boolean AS registered,
       EXISTS (SELECT 1 FROM inserted)::boolean AS inserted,
       (next_due.due_at IS NOT NULL)::boolean AS has_next_due,
       coalesce(floor(extract(epoch FROM next_due.due_at - coalesce(sqlc.narg('now')::timestamptz, now())) * 1e6), 0)::bigint AS next_due_in_us
  FROM next_due;

-- name: OutboxListenerAwake :exec
-- Ends a relay's idle registration (the relay stops, or lost its LISTEN).
DELETE FROM document_compilation_outbox_idle_listeners l
 WHERE l.listener_id = @listener_id::text;

-- name: MarkDispatched :many
-- Records a batch of successful publications, one element per claimed row
-- (parallel arrays). A row whose token no longer matches, or whose attempt
-- is not waiting for a delivery, is left out of the result and unchanged.
-- Attempts are locked in id order so concurrent batches cannot deadlock.
WITH input AS (
  -- Set-returning functions in one SELECT list advance in lockstep.
  SELECT unnest(@outbox_ids::uuid[]) AS outbox_id,
         unnest(@lock_tokens::uuid[]) AS lock_token,
         unnest(@queue_job_ids::text[]) AS queue_job_id,
         nullif(unnest(@external_job_ids::text[]), '') AS external_job_id
),
attempt AS (
  SELECT a.id, input.outbox_id, input.lock_token, input.queue_job_id, input.external_job_id
    FROM document_compilation_attempts a
    JOIN document_compilation_outbox o0 ON o0.attempt_id = a.id
    JOIN input ON input.outbox_id = o0.id
   -- guard:awaiting-delivery
   WHERE (a.run_state IN ('dispatch_pending', 'retry_wait', 'queued')
          OR (a.run_state = 'running'
              AND a.lease_expires_at <= coalesce(sqlc.narg('now')::timestamptz, now())))
   -- end guard
   ORDER BY a.id
     FOR UPDATE OF a
),
outbox AS (
  SELECT o.id, attempt.id AS attempt_id, attempt.queue_job_id, attempt.external_job_id
    FROM document_compilation_outbox o
    JOIN attempt ON o.id = attempt.outbox_id
   WHERE o.status = 'dispatching'
     AND o.lock_token = attempt.lock_token
   ORDER BY o.id
     FOR UPDATE OF o
),
attempt_update AS (
  UPDATE document_compilation_attempts a
     SET queue_job_id = outbox.queue_job_id,
         external_job_id = outbox.external_job_id,
         run_state = CASE WHEN a.run_state = 'running' THEN 'running' ELSE 'queued' END,
         retry_at = NULL,
         row_version = a.row_version + 1,
         updated_at = coalesce(sqlc.narg('now')::timestamptz, now())
    FROM outbox
   WHERE a.id = outbox.attempt_id
  RETURNING a.id
)
UPDATE document_compilation_outbox o
   SET status = 'dispatched',
       delivered_at = coalesce(sqlc.narg('now')::timestamptz, now()),
       queue_job_id = outbox.queue_job_id,
       external_job_id = outbox.external_job_id,
       -- block:relay-lock-end
       locked_by = NULL, lock_token = NULL, locked_until = NULL,
       -- end block
       -- Visibility deadline: republished if no worker leases it by then.
       available_at = coalesce(sqlc.narg('now')::timestamptz, now()) + @visibility_timeout::interval,
       updated_at = coalesce(sqlc.narg('now')::timestamptz, now())
  FROM outbox
 WHERE o.id = outbox.id
   AND CASE WHEN @async_commit::boolean THEN set_config('synchronous_commit', 'off', true) IS NOT NULL ELSE true END
RETURNING o.*;

-- name: ReleaseOutbox :one
-- A failed publication. Backs the row off (pending, due again after
-- backoff) or, once dispatch_attempts (counted at claim) reaches
-- max_dispatch_attempts, dead-letters it and fails the attempt with
-- OUTBOX_DEAD. Fenced by the claim's lock token.
--
-- Only an attempt waiting for a delivery (dispatch_pending, retry_wait,
-- queued, or running with an expired lease) is dead-lettered; the outbox
-- row is dead exactly when dead_attempt failed its attempt. An attempt
-- running with a live lease by this statement's clock (the claim's clock
-- saw it expired; this one, in a transaction begun earlier or behind it,
-- does not) keeps its worker: whether dead-lettering or backing off, the
-- row goes back to the lease (leased, due at the lease's expiry, the error
-- recorded) and the attempt is untouched, so the pair stays running/leased
-- and the worker's lease holds (backing off would leave it fenced out, as
-- the lease guard needs its row leased). The relay sees status leased.
WITH attempt AS (
  SELECT a.id, a.lease_expires_at,
         a.run_state = 'running'
           AND a.lease_expires_at > coalesce(sqlc.narg('now')::timestamptz, now()) AS lease_live
    FROM document_compilation_attempts a
   WHERE a.id = (SELECT o0.attempt_id FROM document_compilation_outbox o0 WHERE o0.id = @outbox_id)
     FOR UPDATE
),
outbox AS (
  SELECT o.id, o.attempt_id, attempt.lease_live, attempt.lease_expires_at,
         o.dispatch_attempts >= @max_dispatch_attempts::integer AS exhausted
    FROM document_compilation_outbox o
    JOIN attempt ON o.attempt_id = attempt.id
   WHERE o.id = @outbox_id
     AND o.status = 'dispatching'
     AND o.lock_token = @lock_token::uuid
     FOR UPDATE OF o
),
dead_attempt AS (
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
         last_error_code = 'OUTBOX_DEAD',
         last_error_message = @last_error::text,
         row_version = a.row_version + 1,
         updated_at = coalesce(sqlc.narg('now')::timestamptz, now())
    FROM outbox
   WHERE a.id = outbox.attempt_id
     AND outbox.exhausted
     -- guard:awaiting-delivery
     AND (a.run_state IN ('dispatch_pending', 'retry_wait', 'queued')
          OR (a.run_state = 'running'
              AND a.lease_expires_at <= coalesce(sqlc.narg('now')::timestamptz, now())))
     -- end guard
  RETURNING a.id
)
UPDATE document_compilation_outbox o
   SET status = CASE WHEN dead_attempt.id IS NOT NULL THEN 'dead'
                     WHEN outbox.lease_live THEN 'leased'
                     ELSE 'pending'
                END,
       available_at = CASE WHEN dead_attempt.id IS NOT NULL THEN o.available_at
                           WHEN outbox.lease_live THEN outbox.lease_expires_at
                           ELSE coalesce(sqlc.narg('now')::timestamptz, now()) + @backoff::interval
                      END,
       last_error = @last_error::text,
       -- block:relay-lock-end
       locked_by = NULL, lock_token = NULL, locked_until = NULL,
       -- end block
       updated_at = coalesce(sqlc.narg('now')::timestamptz, now())
  FROM outbox
  LEFT JOIN dead_attempt ON dead_attempt.id = outbox.attempt_id
 WHERE o.id = outbox.id
RETURNING o.*;
