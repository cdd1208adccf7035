-- Read queries for operators (a CLI, a web console): list, count and
-- diagnose attempts without scanning history. Every statement is served by
-- a seed index and bounded by a limit or a count cap, so its cost does not
-- grow with the retained history (tests/repo/plans_test.go EXPLAINs them).
-- The clock is coalesce(sqlc.narg('now'), now()), as everywhere.


-- name: ListAttempts :many
-- One page of a tenant's attempts in the given run states, in
-- tenant_completed_idx's order read backwards: live attempts first, newest
-- first (completed_at NULL, UUIDv7 id descending), then terminal ones, most
-- recently completed first. Keyset pagination: the page starts after the
-- cursor (after_completed_at, after_id); both NULL start at the top. Each
-- half is one backward range scan of the index that starts at the cursor
-- (the coalesce defaults keep the bounds index conditions: an
-- "x IS NULL OR ..." would become a filter and read from the top every
-- time). scan_live is false once the cursor is past the live rows, and
-- false or scan_terminal false when no asked state is in that half, so a
-- half that cannot match is not read. The halves are re-joined to the
-- table by id: at most 2 * row_limit primary key lookups.
--
-- The age filters (older_than, newer_than; '0' for none) measure from when
-- an attempt ended, or, while it is live, from when it was created. On
-- the terminal half they bound completed_at, so they are index conditions
-- of the same range scan (a CASE of parameters and now() is a constant of
-- the scan); on the live half created_at is a filter on the tenant's live
-- rows. last_error_code ('' for any) is a filter on both: the scan reads
-- past the rows of other codes up to the page's LIMIT, so a rare code
-- reads the tenant's range (for a code its statistics call rare, the
-- planner may read that range as a bitmap scan and sort the few matches).
WITH page AS (
  (SELECT a.id
     FROM document_compilation_attempts a
    WHERE @scan_live::boolean
      AND a.tenant_id = @tenant_id::text
      AND a.completed_at IS NULL
      AND a.id < coalesce(sqlc.narg('after_id')::uuid, 'ffffffff-ffff-ffff-ffff-ffffffffffff'::uuid)
      AND a.run_state = ANY(@run_states::text[])
      AND (sqlc.narg('knowledge_space_id')::uuid IS NULL OR a.knowledge_space_id = sqlc.narg('knowledge_space_id')::uuid)
      AND (@older_than::interval <= '0' OR a.created_at < coalesce(sqlc.narg('now')::timestamptz, now()) - @older_than::interval)
      AND (@newer_than::interval <= '0' OR a.created_at >= coalesce(sqlc.narg('now')::timestamptz, now()) - @newer_than::interval)
      AND (@last_error_code::text = '' OR a.last_error_code = @last_error_code::text)
    ORDER BY a.completed_at DESC, a.id DESC
    LIMIT @row_limit::integer)
  UNION ALL
  (SELECT a.id
     FROM document_compilation_attempts a
    WHERE @scan_terminal::boolean
      AND a.tenant_id = @tenant_id::text
      AND (a.completed_at, a.id) < (coalesce(sqlc.narg('after_completed_at')::timestamptz, 'infinity'::timestamptz),
                                    coalesce(sqlc.narg('after_id')::uuid, 'ffffffff-ffff-ffff-ffff-ffffffffffff'::uuid))
      AND a.completed_at < CASE WHEN @older_than::interval > '0'
                                THEN coalesce(sqlc.narg('now')::timestamptz, now()) - @older_than::interval
                                ELSE 'infinity'::timestamptz END
      AND a.completed_at >= CASE WHEN @newer_than::interval > '0'
                                 THEN coalesce(sqlc.narg('now')::timestamptz, now()) - @newer_than::interval
                                 ELSE '-infinity'::timestamptz END
      AND a.run_state = ANY(@run_states::text[])
      AND (sqlc.narg('knowledge_space_id')::uuid IS NULL OR a.knowledge_space_id = sqlc.narg('knowledge_space_id')::uuid)
      AND (@last_error_code::text = '' OR a.last_error_code = @last_error_code::text)
    ORDER BY a.completed_at DESC, a.id DESC
    LIMIT @row_limit::integer)
)
SELECT a.*
  FROM page p
  JOIN document_compilation_attempts a ON a.id = p.id
 ORDER BY a.completed_at DESC NULLS FIRST, a.id DESC
 LIMIT @row_limit::integer;

-- name: CountAttempts :one
-- A tenant's attempts per run state, each counted up to count_limit rows (the cap + 1)
-- (count_limit of them read as "at least the cap"). One subquery per
-- state with the state as a literal, so the planner weighs each on its own
-- statistics: tenant_completed_idx's tenant range (live or terminal half),
-- or run_schedule_idx's state range when the state is rare.
SELECT
       (SELECT count(*) FROM (SELECT 1 FROM document_compilation_attempts a
                               WHERE a.tenant_id = @tenant_id::text AND a.completed_at IS NULL
                                 AND a.run_state = 'dispatch_pending'
                               LIMIT @count_limit::integer) c)::bigint AS dispatch_pending,
       (SELECT count(*) FROM (SELECT 1 FROM document_compilation_attempts a
                               WHERE a.tenant_id = @tenant_id::text AND a.completed_at IS NULL
                                 AND a.run_state = 'queued'
                               LIMIT @count_limit::integer) c)::bigint AS queued,
       (SELECT count(*) FROM (SELECT 1 FROM document_compilation_attempts a
                               WHERE a.tenant_id = @tenant_id::text AND a.completed_at IS NULL
                                 AND a.run_state = 'running'
                               LIMIT @count_limit::integer) c)::bigint AS running,
       (SELECT count(*) FROM (SELECT 1 FROM document_compilation_attempts a
                               WHERE a.tenant_id = @tenant_id::text AND a.completed_at IS NULL
                                 AND a.run_state = 'retry_wait'
                               LIMIT @count_limit::integer) c)::bigint AS retry_wait,
       (SELECT count(*) FROM (SELECT 1 FROM document_compilation_attempts a
                               WHERE a.tenant_id = @tenant_id::text AND a.completed_at IS NOT NULL
                                 AND a.run_state = 'succeeded'
                               LIMIT @count_limit::integer) c)::bigint AS succeeded,
       (SELECT count(*) FROM (SELECT 1 FROM document_compilation_attempts a
                               WHERE a.tenant_id = @tenant_id::text AND a.completed_at IS NOT NULL
                                 AND a.run_state = 'failed'
                               LIMIT @count_limit::integer) c)::bigint AS failed,
       (SELECT count(*) FROM (SELECT 1 FROM document_compilation_attempts a
                               WHERE a.tenant_id = @tenant_id::text AND a.completed_at IS NOT NULL
                                 AND a.run_state = 'canceled'
                               LIMIT @count_limit::integer) c)::bigint AS canceled,
       (SELECT count(*) FROM (SELECT 1 FROM document_compilation_attempts a
                               WHERE a.tenant_id = @tenant_id::text AND a.completed_at IS NOT NULL
                                 AND a.run_state = 'superseded'
                               LIMIT @count_limit::integer) c)::bigint AS superseded;

-- name: CountAttemptsAllTenants :one
-- Every tenant's attempts per run state, each counted up to count_limit
-- (the cap + 1): an index-only range of run_schedule_idx, which leads with
-- run_state. The ORDER BY is that index's, so the planner never prefers a
-- sequential scan that stops at the limit for a common state (its cost
-- would still grow with the rows of other states it passes).
SELECT
       (SELECT count(*) FROM (SELECT 1 FROM document_compilation_attempts a
                               WHERE a.run_state = 'dispatch_pending'
                               ORDER BY a.retry_at, a.created_at, a.id
                               LIMIT @count_limit::integer) c)::bigint AS dispatch_pending,
       (SELECT count(*) FROM (SELECT 1 FROM document_compilation_attempts a
                               WHERE a.run_state = 'queued'
                               ORDER BY a.retry_at, a.created_at, a.id
                               LIMIT @count_limit::integer) c)::bigint AS queued,
       (SELECT count(*) FROM (SELECT 1 FROM document_compilation_attempts a
                               WHERE a.run_state = 'running'
                               ORDER BY a.retry_at, a.created_at, a.id
                               LIMIT @count_limit::integer) c)::bigint AS running,
       (SELECT count(*) FROM (SELECT 1 FROM document_compilation_attempts a
                               WHERE a.run_state = 'retry_wait'
                               ORDER BY a.retry_at, a.created_at, a.id
                               LIMIT @count_limit::integer) c)::bigint AS retry_wait,
       (SELECT count(*) FROM (SELECT 1 FROM document_compilation_attempts a
                               WHERE a.run_state = 'succeeded'
                               ORDER BY a.retry_at, a.created_at, a.id
                               LIMIT @count_limit::integer) c)::bigint AS succeeded,
       (SELECT count(*) FROM (SELECT 1 FROM document_compilation_attempts a
                               WHERE a.run_state = 'failed'
                               ORDER BY a.retry_at, a.created_at, a.id
                               LIMIT @count_limit::integer) c)::bigint AS failed,
       (SELECT count(*) FROM (SELECT 1 FROM document_compilation_attempts a
                               WHERE a.run_state = 'canceled'
                               ORDER BY a.retry_at, a.created_at, a.id
                               LIMIT @count_limit::integer) c)::bigint AS canceled,
       (SELECT count(*) FROM (SELECT 1 FROM document_compilation_attempts a
                               WHERE a.run_state = 'superseded'
                               ORDER BY a.retry_at, a.created_at, a.id
                               LIMIT @count_limit::integer) c)::bigint AS superseded;

-- name: OutboxBacklog :one
-- The outbox rows due now per status, each counted up to count_limit (the cap + 1),
-- and the oldest due time: rows waiting for a (re)publication
-- (delivery_due_idx: status, available_at) and relay claims whose lock
-- expired (lock_recovery_idx: status, locked_until). The outbox has no
-- tenant column, so the backlog is the whole table's. Each head is the
-- first entry of its status's range.
WITH due_heads AS (
  SELECT min(h.due_at) AS due_at
    FROM ((SELECT o.available_at AS due_at FROM document_compilation_outbox o
            WHERE o.status = 'pending' AND o.available_at <= coalesce(sqlc.narg('now')::timestamptz, now())
            ORDER BY o.available_at LIMIT 1)
          UNION ALL
          (SELECT o.available_at FROM document_compilation_outbox o
            WHERE o.status = 'dispatched' AND o.available_at <= coalesce(sqlc.narg('now')::timestamptz, now())
            ORDER BY o.available_at LIMIT 1)
          UNION ALL
          (SELECT o.available_at FROM document_compilation_outbox o
            WHERE o.status = 'leased' AND o.available_at <= coalesce(sqlc.narg('now')::timestamptz, now())
            ORDER BY o.available_at LIMIT 1)
          UNION ALL
          (SELECT o.locked_until FROM document_compilation_outbox o
            WHERE o.status = 'dispatching' AND o.locked_until <= coalesce(sqlc.narg('now')::timestamptz, now())
            ORDER BY o.locked_until LIMIT 1)) h
)
SELECT
       (SELECT count(*) FROM (SELECT 1 FROM document_compilation_outbox o
                               WHERE o.status = 'pending' AND o.available_at <= coalesce(sqlc.narg('now')::timestamptz, now())
                               LIMIT @count_limit::integer) c)::bigint AS pending,
       (SELECT count(*) FROM (SELECT 1 FROM document_compilation_outbox o
                               WHERE o.status = 'dispatching' AND o.locked_until <= coalesce(sqlc.narg('now')::timestamptz, now())
                               LIMIT @count_limit::integer) c)::bigint AS dispatching,
       (SELECT count(*) FROM (SELECT 1 FROM document_compilation_outbox o
                               WHERE o.status = 'dispatched' AND o.available_at <= coalesce(sqlc.narg('now')::timestamptz, now())
                               LIMIT @count_limit::integer) c)::bigint AS dispatched,
       (SELECT count(*) FROM (SELECT 1 FROM document_compilation_outbox o
                               WHERE o.status = 'leased' AND o.available_at <= coalesce(sqlc.narg('now')::timestamptz, now())
                               LIMIT @count_limit::integer) c)::bigint AS leased,
       (due_heads.due_at IS NOT NULL)::boolean AS has_due,
       coalesce(due_heads.due_at, coalesce(sqlc.narg('now')::timestamptz, now()))::timestamptz AS oldest_due_at,
       coalesce(sqlc.narg('now')::timestamptz, now())::timestamptz AS db_now
  FROM due_heads;

-- name: ListStuck :many
-- Attempts that should have moved on and have not, oldest first, each with
-- a reason code (repo.StuckReason) and since when. Each reason is one
-- range at the head of an index, limited to row_limit:
--   lease_expired      running past lease_expires_at (lease_recovery_idx)
--   relay_lock_expired dispatching past locked_until (lock_recovery_idx)
--   visibility_expired dispatched past available_at (delivery_due_idx)
--   pending_overdue    pending, due for longer than pending_overdue
--                      (delivery_due_idx)
--   dead_not_terminal  outbox dead while the attempt is live: read from
--                      the live attempts (run_schedule_idx leads with
--                      run_state), never from the dead rows, which are
--                      history.
-- all_tenants false confines every range to tenant_id (a filter: the
-- ranges are short, only stuck rows are in them).
WITH stuck AS (
  (SELECT a.id AS attempt_id, 'lease_expired'::text AS reason, a.lease_expires_at AS since
     FROM document_compilation_attempts a
    WHERE a.run_state = 'running'
      AND a.lease_expires_at <= coalesce(sqlc.narg('now')::timestamptz, now())
      AND (@all_tenants::boolean OR a.tenant_id = @tenant_id::text)
    ORDER BY a.lease_expires_at
    LIMIT @row_limit::integer)
  UNION ALL
  (SELECT o.attempt_id, 'relay_lock_expired'::text, o.locked_until
     FROM document_compilation_outbox o
     JOIN document_compilation_attempts a ON a.id = o.attempt_id
    WHERE o.status = 'dispatching'
      AND o.locked_until <= coalesce(sqlc.narg('now')::timestamptz, now())
      AND (@all_tenants::boolean OR a.tenant_id = @tenant_id::text)
    ORDER BY o.locked_until
    LIMIT @row_limit::integer)
  UNION ALL
  (SELECT o.attempt_id, 'visibility_expired'::text, o.available_at
     FROM document_compilation_outbox o
     JOIN document_compilation_attempts a ON a.id = o.attempt_id
    WHERE o.status = 'dispatched'
      AND o.available_at <= coalesce(sqlc.narg('now')::timestamptz, now())
      AND (@all_tenants::boolean OR a.tenant_id = @tenant_id::text)
    ORDER BY o.available_at
    LIMIT @row_limit::integer)
  UNION ALL
  (SELECT o.attempt_id, 'pending_overdue'::text, o.available_at
     FROM document_compilation_outbox o
     JOIN document_compilation_attempts a ON a.id = o.attempt_id
    WHERE o.status = 'pending'
      AND o.available_at <= coalesce(sqlc.narg('now')::timestamptz, now()) - @pending_overdue::interval
      AND (@all_tenants::boolean OR a.tenant_id = @tenant_id::text)
    ORDER BY o.available_at
    LIMIT @row_limit::integer)
  UNION ALL
  (SELECT a.id, 'dead_not_terminal'::text, o.updated_at
     FROM document_compilation_attempts a
     JOIN document_compilation_outbox o ON o.attempt_id = a.id
    WHERE a.run_state IN ('dispatch_pending', 'queued', 'running', 'retry_wait')
      AND o.status = 'dead'
      AND (@all_tenants::boolean OR a.tenant_id = @tenant_id::text)
    ORDER BY o.updated_at
    LIMIT @row_limit::integer)
)
SELECT sqlc.embed(a), sqlc.embed(o), s.reason::text AS reason, s.since::timestamptz AS since,
       coalesce(sqlc.narg('now')::timestamptz, now())::timestamptz AS db_now
  FROM stuck s
  JOIN document_compilation_attempts a ON a.id = s.attempt_id
  JOIN document_compilation_outbox o ON o.attempt_id = a.id
 ORDER BY s.since, a.id, s.reason
 LIMIT @row_limit::integer;

-- name: Throughput :many
-- Attempts that ended per minute of the last `minutes` minutes, per
-- terminal state: one row per minute, oldest first, the current (partial)
-- minute last, zeros included; at most max_rows ended attempts are read.
-- Each tenant's ended attempts are one range of tenant_completed_idx
-- (tenant_id, completed_at), so the cost grows with the attempts ended in
-- the window, not with the history. all_tenants walks the index's distinct
-- tenants first (a loose index scan: one index probe per tenant, since
-- PostgreSQL 17 has no skip scan) and reads each tenant's range; otherwise
-- only tenant_id's range is read.
WITH RECURSIVE tenants AS (
  (SELECT a.tenant_id::text AS tenant_id
     FROM document_compilation_attempts a
    WHERE @all_tenants::boolean
    ORDER BY a.tenant_id
    LIMIT 1)
  UNION ALL
  SELECT (SELECT a.tenant_id::text
            FROM document_compilation_attempts a
           WHERE a.tenant_id > t.tenant_id
           ORDER BY a.tenant_id
           LIMIT 1)
    FROM tenants t
   WHERE t.tenant_id IS NOT NULL
), scope AS (
  SELECT t.tenant_id FROM tenants t WHERE t.tenant_id IS NOT NULL
  UNION ALL
  SELECT @tenant_id::text WHERE NOT @all_tenants::boolean
), clock AS (
  SELECT coalesce(sqlc.narg('now')::timestamptz, now()) AS until,
         @minutes::integer AS minutes
), bounds AS (
  SELECT date_trunc('minute', c.until) - (c.minutes - 1) * interval '1 minute' AS since, c.until
    FROM clock c
), ended AS (
  SELECT a.completed_at, a.run_state
    FROM scope s
   CROSS JOIN bounds b
   CROSS JOIN LATERAL (
     SELECT x.completed_at, x.run_state
       FROM document_compilation_attempts x
      WHERE x.tenant_id = s.tenant_id
        AND x.completed_at >= b.since
        AND x.completed_at <= b.until
      ORDER BY x.completed_at DESC
     -- Newest first, at most max_rows per tenant (the LIMIT is also a
     -- fence: without one the planner flattens the subquery and, knowing
     -- nothing of the walk's row count, hashes a sequential scan).
     LIMIT @max_rows::integer) a
   -- At most max_rows in all: the nested loop stops reading there, so a
   -- burst of ended attempts costs a bounded read; the counts are then
   -- lower bounds (the caller sees their sum reach max_rows).
   LIMIT @max_rows::integer
)
SELECT m.minute::timestamptz AS minute,
       (count(*) FILTER (WHERE e.run_state = 'succeeded'))::bigint AS succeeded,
       (count(*) FILTER (WHERE e.run_state = 'failed'))::bigint AS failed,
       (count(*) FILTER (WHERE e.run_state = 'canceled'))::bigint AS canceled,
       (count(*) FILTER (WHERE e.run_state = 'superseded'))::bigint AS superseded
  FROM bounds b
 CROSS JOIN generate_series(b.since, date_trunc('minute', b.until), interval '1 minute') AS m(minute)
  LEFT JOIN ended e ON date_trunc('minute', e.completed_at) = m.minute
 GROUP BY m.minute
 ORDER BY m.minute;
