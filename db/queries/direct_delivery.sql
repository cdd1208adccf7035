-- Direct delivery: PostgreSQL itself as the queue. A worker fetches due
-- outbox rows and leases their attempts in one statement, with no relay,
-- publication or AcquireLease in between. The pairs it takes are exactly
-- those the relay's ClaimOutbox would claim (a due outbox row whose
-- attempt awaits a delivery), and each moves straight to running / leased:
--
--   dispatch_pending / pending (or dispatching past its relay lock) -> running / leased
--   retry_wait / pending, at retry_at                                -> running / leased
--   queued / dispatched, past its visibility deadline                -> running / leased
--   running / leased, past the lease's expiry (a lost worker)       -> running / leased
--   any of these with no execution attempts left                    -> failed / dead
--
-- so the state table's pairings hold after the statement as after an
-- AcquireLease (or FailExhausted): the queued step is skipped because
-- nothing is published. Rows and attempts are both taken FOR UPDATE SKIP
-- LOCKED, never waited on, so the attempt-first lock order of the other
-- transitions cannot deadlock against it, and a relay (for an external
-- broker) can run beside direct workers: a row either holds is skipped.
--
-- The exhausted attempt's failure is FailExhausted's SET list, marked
-- "-- block:exhausted" in both (with the "-- block:lease-end" list inside),
-- the awaiting-delivery guard is MarkDispatched's, and the walk's probe
-- and the offers test an outbox row the same way (guard:outbox-due);
-- repo/guards_test.go checks the copies (worker.sql's header describes
-- the markers).

-- name: FetchLeases :many
-- Leases up to batch_size due attempts to worker_id, fairly across
-- tenants. Tenants are walked in tenant_id order from after_tenant
-- (wrapping), two index descents each on tenant_completed_idx (the next
-- tenant, and whether one of its live attempts has a due outbox row),
-- until batch_size tenants with due rows are found or max_tenants are
-- walked; the tenant of one due outbox row (delivery_due_idx) comes after
-- them if the walk missed it, so tenants with nothing due never hide a
-- backlog behind them. Each tenant with due rows offers its oldest live
-- attempts (the same index: tenant_id, completed_at IS NULL, id, and ids
-- are UUIDv7, so id order is start order) whose outbox row is due, at
-- most per_tenant and at most what it could take if every other tenant
-- took one (plus its share of the batch as spares for rows a concurrent
-- fetch holds; at most per_tenant are taken). The offers are taken round by
-- round (every tenant's first, then every tenant's second, ...) until
-- batch_size: a tenant's backlog cannot take every slot while another
-- tenant waits, and the cost is bounded by max_tenants descents plus
-- about 2 * batch_size offers whatever the backlog. The chosen rows
-- are re-checked on their newest versions when locked (READ COMMITTED
-- re-evaluates the WHERE of a row that changed since the snapshot), so a
-- pair that a cancel, a relay or another fetcher changed meanwhile is
-- skipped. A tenant with a cap (document_compilation_tenant_limits,
-- migration 0008, whose header says why it holds across processes) is
-- offered only its free places, one with a rate (migration 0011) only
-- its whole tokens, which the statement spends, and a paused one nothing.
-- A fetch that filled its batch ends its worker's idle registration
-- (OutboxListenerIdle; see awake below).
--
-- Tenant lists (pgsource's Config.Tenants / ExcludeTenants; at most one is
-- set): with include_tenants the walk goes down that list itself, sorted
-- bytewise (COLLATE "C", Go's string order) from the first entry after
-- after_tenant, wrapping, one probe each and no descent to find the next
-- tenant; with exclude_tenants it walks every tenant as without a list,
-- and an excluded one it meets costs the one descent that found it (the
-- next descent starts past all its entries): it is neither probed nor
-- counted in max_tenants. The tenant of the due outbox row found after the
-- walk is offered only when the lists allow it, else nothing is: a backlog
-- of excluded tenants at the head of delivery_due_idx is never read past
-- its first row. A fetch that leased nothing after a walk stopped at
-- max_tenants returns one walk_end row (no attempt: the last tenant walked,
-- for the next fetch's after_tenant), so that tenants with nothing due, or
-- due rows it may not take, cannot hold the cursor in place (repo turns it
-- into NextAfterTenant).
WITH RECURSIVE
-- The include list in walk order: the entries after after_tenant first,
-- bytewise, then the others (the walk wraps); built once, and each step
-- reads its entry by subscript.
included AS (
  SELECT listed.tenant_id, listed.tenant_id COLLATE "C" <= @after_tenant::text AS wrapped
    FROM (SELECT unnest(sqlc.narg('include_tenants')::text[]) AS tenant_id) listed
),
include_walk AS (
  SELECT ARRAY(SELECT i.tenant_id FROM included i ORDER BY i.wrapped, i.tenant_id COLLATE "C") AS tenants
),
tenant_walk (tenant_id, first_tenant, pos, looked, first_due, dues) AS (
  -- Position 0 is the cursor itself, not walked.
  SELECT @after_tenant::text AS tenant_id, NULL::text AS first_tenant, 0 AS pos, 0 AS looked, NULL::uuid AS first_due, 0 AS dues
  UNION ALL
  -- The next tenant, or the lowest again (the walk wraps) until the first,
  -- and its oldest live attempt with a due row, if any (its first offer:
  -- the offers start there, past its running attempts); until batch_size
  -- tenants with due rows are found: their first offers fill the batch,
  -- so a tenant further on could only take a spare's place.
  -- An excluded tenant is passed: no probe, and not counted in looked,
  -- the tenants max_tenants bounds.
  SELECT nxt.tenant_id, coalesce(w.first_tenant, nxt.tenant_id), w.pos + 1,
         w.looked + (NOT nxt.excluded)::integer, due.first_due,
         w.dues + (due.first_due IS NOT NULL)::integer
    FROM tenant_walk w
   CROSS JOIN LATERAL (
     SELECT n.tenant_id, coalesce(n.tenant_id = ANY (sqlc.narg('exclude_tenants')::text[]), false) AS excluded
       FROM (SELECT CASE WHEN sqlc.narg('include_tenants')::text[] IS NULL
                    THEN coalesce((SELECT a.tenant_id FROM document_compilation_attempts a
                                    WHERE a.tenant_id > w.tenant_id ORDER BY a.tenant_id LIMIT 1),
                                  (SELECT a.tenant_id FROM document_compilation_attempts a
                                    ORDER BY a.tenant_id LIMIT 1))
                    -- The list's next entry; none past its end (it holds
                    -- each tenant once, so the walk stops there).
                    ELSE (SELECT i.tenants[w.pos + 1] FROM include_walk i)
                    END AS tenant_id
              -- Once per step: read twice (the column, the exclusion),
              -- it would otherwise be copied into both, and the descent
              -- run twice.
              OFFSET 0) n
     -- Computed once per step (OFFSET 0 keeps the planner from copying
     -- the subquery into every expression that uses it).
     OFFSET 0
   ) nxt
   CROSS JOIN LATERAL (
     SELECT CASE WHEN nxt.excluded THEN NULL ELSE (SELECT a.id
               FROM document_compilation_attempts a
               -- The tenant's live attempts in order, each one's outbox
               -- row probed by attempt_id (see offers for why the join
               -- order is not the planner's).
               CROSS JOIN LATERAL (
                 SELECT o.id FROM document_compilation_outbox o
                  WHERE o.attempt_id = a.id
                    -- guard:outbox-due
                    AND ((o.status IN ('pending', 'dispatched', 'leased')
                          AND o.available_at <= coalesce(sqlc.narg('now')::timestamptz, now()))
                         OR (o.status = 'dispatching'
                             AND o.locked_until <= coalesce(sqlc.narg('now')::timestamptz, now()))) IS TRUE
                    -- end guard
                 OFFSET 0) o
              WHERE a.tenant_id = nxt.tenant_id
                AND a.completed_at IS NULL
                -- A paused tenant, or one whose bucket holds less than a
                -- token (migration 0011), is passed as one with nothing
                -- due: it would take a tenant's place in the batch and
                -- get nothing. Read from the snapshot (the quota below
                -- reads the locked row); a primary key probe, run before
                -- the attempts are (it depends on the tenant alone).
                AND NOT EXISTS (SELECT 1 FROM document_compilation_tenant_limits l
                                 WHERE l.tenant_id = nxt.tenant_id
                                   AND (l.paused_at IS NOT NULL
                                        OR document_compilation_tenant_tokens(l.tokens, l.burst, l.leases_per_second, l.tokens_at,
                                             coalesce(sqlc.narg('now')::timestamptz, now())) < 1))
              ORDER BY a.tenant_id, a.completed_at, a.id
              LIMIT 1) END AS first_due
     -- Once per step too: first_due is read twice below (the column and
     -- the count of tenants with due rows), and without OFFSET 0 each read
     -- ran the probe again, a second walk of the tenant's live attempts.
     OFFSET 0
   ) due
   WHERE w.looked < @max_tenants::integer
     AND w.dues < @batch_size::integer
     AND nxt.tenant_id IS NOT NULL
     AND nxt.tenant_id IS DISTINCT FROM w.first_tenant
),
-- The tenants offered: those of the walk with due rows, and, after them,
-- the tenant of a due outbox row (delivery_due_idx's first) if the walk
-- did not reach it. Without it, max_tenants tenants with nothing due after
-- after_tenant (history only, or live attempts all running) would make
-- every fetch from there come back empty, and the cursor, which moves
-- with the tenants served, would never pass them.
walked AS MATERIALIZED (
  SELECT w.tenant_id, w.pos, w.first_due FROM tenant_walk w WHERE w.pos > 0 AND w.first_due IS NOT NULL
  UNION ALL
  SELECT d.tenant_id, (SELECT max(w.pos) FROM tenant_walk w) + 1, NULL::uuid
    FROM (SELECT a.tenant_id
            -- One descent per status, in the index's order (a LIMIT 1
            -- left to the planner was a sequential scan from the table's
            -- first page, through all its history).
            FROM ((SELECT o.attempt_id FROM document_compilation_outbox o
                    WHERE o.status = 'pending'
                      AND o.available_at <= coalesce(sqlc.narg('now')::timestamptz, now())
                    ORDER BY o.status, o.available_at LIMIT 1)
                  UNION ALL
                  (SELECT o.attempt_id FROM document_compilation_outbox o
                    WHERE o.status = 'leased'
                      AND o.available_at <= coalesce(sqlc.narg('now')::timestamptz, now())
                    ORDER BY o.status, o.available_at LIMIT 1)
                  UNION ALL
                  (SELECT o.attempt_id FROM document_compilation_outbox o
                    WHERE o.status = 'dispatched'
                      AND o.available_at <= coalesce(sqlc.narg('now')::timestamptz, now())
                    ORDER BY o.status, o.available_at LIMIT 1)
                  UNION ALL
                  (SELECT o.attempt_id FROM document_compilation_outbox o
                    WHERE o.status = 'dispatching'
                      AND o.locked_until <= coalesce(sqlc.narg('now')::timestamptz, now())
                    ORDER BY o.status, o.locked_until LIMIT 1)
                  LIMIT 1) due
            JOIN document_compilation_attempts a ON a.id = due.attempt_id) d
   -- Only when the walk stopped at max_tenants short of a batch: one that
   -- came back to its first tenant (or to the end of the include list)
   -- walked them all, and one that filled the batch needs no other
   -- tenant, so the probe is not run at all.
   WHERE (SELECT max(w.looked) FROM tenant_walk w) >= @max_tenants::integer
     AND (SELECT max(w.dues) FROM tenant_walk w) < @batch_size::integer
     AND NOT EXISTS (SELECT 1 FROM tenant_walk w WHERE w.pos > 0 AND w.tenant_id = d.tenant_id)
     -- The one row found, checked against the lists; never a search for
     -- another (it would read every due row of the tenants left out).
     AND (sqlc.narg('include_tenants')::text[] IS NULL OR d.tenant_id = ANY (sqlc.narg('include_tenants')::text[]))
     AND NOT coalesce(d.tenant_id = ANY (sqlc.narg('exclude_tenants')::text[]), false)
),
-- Limited tenants of the walk (migrations 0008, 0011), locked without
-- waiting: a fetch leasing for a limited tenant makes the others skip it.
-- Locked rows are their newest versions, whatever the snapshot: tokens
-- is the bucket another fetch left at its commit, refilled to now.
capped AS (
  SELECT l.tenant_id, l.max_running, l.leased_by_xid, l.paused_at IS NOT NULL AS paused,
         document_compilation_tenant_tokens(l.tokens, l.burst, l.leases_per_second, l.tokens_at,
                                            coalesce(sqlc.narg('now')::timestamptz, now())) AS tokens,
         l.tokens_at
    FROM document_compilation_tenant_limits l
   WHERE l.tenant_id IN (SELECT tenant_id FROM walked)
     FOR UPDATE SKIP LOCKED
),
-- What each tenant may get: per_tenant, or for a limited tenant at most
-- its free places (a cap) and its whole tokens (a rate), and none while
-- it is paused, while another fetch holds its row, or, for a capped one,
-- when the last fetch that leased for it committed after this
-- statement's snapshot (its leases would be missing from the count).
quotas AS (
  SELECT w.tenant_id, w.pos, w.first_due,
         CASE WHEN NOT EXISTS (SELECT 1 FROM document_compilation_tenant_limits l WHERE l.tenant_id = w.tenant_id)
                THEN @per_tenant::integer
              WHEN c.tenant_id IS NULL
                   OR c.paused
                   OR (c.max_running IS NOT NULL
                       AND c.leased_by_xid IS NOT NULL
                       AND NOT pg_visible_in_snapshot(c.leased_by_xid, pg_current_snapshot()))
                THEN 0
              -- least() passes over the NULL of a limit the tenant has not.
              ELSE least(@per_tenant::integer,
                         CASE WHEN c.max_running IS NOT NULL THEN c.max_running - (
                           SELECT count(*)::integer
                             FROM (SELECT 1
                                     FROM document_compilation_attempts a
                                    WHERE a.tenant_id = w.tenant_id
                                      AND a.completed_at IS NULL
                                      AND a.run_state = 'running'
                                      AND a.lease_expires_at > coalesce(sqlc.narg('now')::timestamptz, now())
                                    LIMIT c.max_running) live) END,
                         floor(c.tokens)::integer)
         END AS quota,
         (SELECT count(*) FROM walked)::integer AS tenants,
         CASE WHEN true THEN @batch_size::integer END AS batch,
         EXISTS (SELECT 1 FROM document_compilation_tenant_limits l WHERE l.tenant_id = w.tenant_id) AS capped
    FROM walked w
    LEFT JOIN capped c ON c.tenant_id = w.tenant_id
),
-- Each tenant offers at most what it can take when each of the others
-- takes one (offers past that could only be spares), and spare offers
-- past that, for an uncapped tenant: a fetch running at the same time
-- (another worker, another process) holds the first ones, and SKIP LOCKED
-- then takes these instead of coming back short. Its share of the batch:
-- a second fetch of the same source walks from the same cursor and holds
-- as many. A capped tenant's row is locked above, so no other fetch
-- leases for it meanwhile.
offer_limits AS (
  SELECT q.tenant_id, q.pos, q.quota, q.first_due,
         CASE WHEN q.quota < q.batch - q.tenants + 1 THEN q.quota ELSE q.batch - q.tenants + 1 END
           + CASE WHEN q.capped THEN 0 ELSE (q.batch + q.tenants - 1) / q.tenants END AS offered
    FROM quotas q
),
-- MATERIALIZED: computed once. Inlined, the planner may put it on the
-- inner side of a nested loop over the attempts and walk every tenant's
-- offers once per attempt (seen with statistics taken on an empty table:
-- 450 ms for 400 due rows instead of under 1 ms).
offers AS MATERIALIZED (
  SELECT w.tenant_id, w.pos, w.quota, offer.attempt_id, offer.outbox_id, offer.round
    FROM offer_limits w
   CROSS JOIN LATERAL (
     SELECT a.id AS attempt_id, o.id AS outbox_id,
            row_number() OVER (ORDER BY a.tenant_id, a.completed_at, a.id) AS round
       FROM document_compilation_attempts a
       -- The attempts first, always: each one's outbox row is a probe by
       -- attempt_id, and OFFSET 0 keeps the planner from pulling the
       -- subquery up into a join it may reorder. As a join, an ANALYZE
       -- that sampled few due rows (after a long-held snapshot) made it
       -- scan the whole outbox and sort, per tenant walked, for every
       -- fetch until the next ANALYZE (three minutes of an hour's churn,
       -- at half the rate).
       CROSS JOIN LATERAL (
         SELECT o.id FROM document_compilation_outbox o
          WHERE o.attempt_id = a.id
            -- One boolean test (IS TRUE), so the outbox row is found by
            -- attempt_id alone: as separate clauses the planner,
            -- estimating few due rows, ANDed a bitmap of
            -- delivery_due_idx's due range into every probe (about 100
            -- buffers each at a backlog of 2,000, per attempt walked;
            -- seen in a drain).
            -- guard:outbox-due
            AND ((o.status IN ('pending', 'dispatched', 'leased')
                  AND o.available_at <= coalesce(sqlc.narg('now')::timestamptz, now()))
                 OR (o.status = 'dispatching'
                     AND o.locked_until <= coalesce(sqlc.narg('now')::timestamptz, now()))) IS TRUE
            -- end guard
         OFFSET 0) o
      WHERE a.tenant_id = w.tenant_id
        AND a.completed_at IS NULL
        -- From the walk's first due attempt: the older live ones are
        -- running (or otherwise not due) and were passed once already.
        AND a.id >= coalesce(w.first_due, '00000000-0000-0000-0000-000000000000'::uuid)
      -- The index's own order (tenant and completed_at are fixed here):
      -- ordering by id alone lets the planner walk the primary key and
      -- filter by tenant, a scan of the whole table for a small tenant.
      ORDER BY a.tenant_id, a.completed_at, a.id
      LIMIT w.offered
   ) offer
   WHERE w.quota > 0
),
picked AS (
  -- Locked rows are their newest versions: row_version is read here.
  -- Every tenant's offers within its quota come before any spare one
  -- (rounds past the quota), so spares are locked only in place of rows
  -- another fetch holds.
  SELECT a.id AS attempt_id, o.id AS outbox_id, a.tenant_id, a.row_version,
         a.execution_attempts >= a.max_execution_attempts AS exhausted,
         offers.quota, offers.round
    FROM (SELECT * FROM offers ORDER BY offers.round, offers.pos) offers
    JOIN document_compilation_attempts a ON a.id = ANY (ARRAY[offers.attempt_id])
    JOIN document_compilation_outbox o ON o.id = ANY (ARRAY[offers.outbox_id])
   -- Point lookups by primary key, in the offers' order, until the batch
   -- is locked: the offers come sorted, so the nested loop streams into
   -- the lock and the limit, and only the rows it locks (and those it
   -- skips) are looked up. "= ANY (ARRAY[x])" is not a hash or merge join
   -- clause, only an index condition, so the planner cannot hash a
   -- sequential scan of both tables instead (which it did with plain
   -- equalities whenever the tables were small next to its estimate of
   -- the offers: 1,000 to 3,400 buffers per fetch at a backlog of 10,000,
   -- growing with the tables), nor join every offer before the sort
   -- (6,400 buffers for 640 offers of 64 tenants). The checks are one
   -- boolean test (IS TRUE), which no index can serve: left as separate
   -- clauses, the planner matched them to delivery_due_idx and
   -- lease_recovery_idx and scanned every due row per fetch. PostgreSQL
   -- still re-evaluates the test on a locked row's newest version.
   WHERE (((o.status IN ('pending', 'dispatched', 'leased')
            AND o.available_at <= coalesce(sqlc.narg('now')::timestamptz, now()))
           OR (o.status = 'dispatching'
               AND o.locked_until <= coalesce(sqlc.narg('now')::timestamptz, now())))
     -- guard:awaiting-delivery
     AND (a.run_state IN ('dispatch_pending', 'retry_wait', 'queued')
          OR (a.run_state = 'running'
              AND a.lease_expires_at <= coalesce(sqlc.narg('now')::timestamptz, now())))
     -- end guard
     AND (a.run_state <> 'retry_wait'
          OR a.retry_at <= coalesce(sqlc.narg('now')::timestamptz, now()))) IS TRUE
   ORDER BY offers.round, offers.pos
   LIMIT @batch_size::integer
     FOR UPDATE OF a, o SKIP LOCKED
),
-- At most its quota per tenant among the rows locked: a spare taken in
-- place of a held row counts as that row. (A spare past the quota stays
-- locked, unchanged, until the commit.)
chosen AS (
  SELECT p.attempt_id, p.outbox_id, p.tenant_id, p.row_version, p.exhausted
    FROM (SELECT picked.*, row_number() OVER (PARTITION BY picked.tenant_id ORDER BY picked.round) AS nth
            FROM picked) p
   WHERE p.nth <= p.quota
),
leased_outbox AS (
  UPDATE document_compilation_outbox o
     SET status = 'leased',
         available_at = coalesce(sqlc.narg('now')::timestamptz, now()) + @lease_duration::interval,
         dispatch_attempts = o.dispatch_attempts + 1,
         delivered_at = coalesce(sqlc.narg('now')::timestamptz, now()),
         -- Deterministic and never reused: the attempt's row_version only
         -- grows, so a redelivery (a lost worker's lease fetched again, a
         -- retry) carries another id than the delivery before it.
         queue_job_id = 'pg:' || o.id::text || ':' || (o.dispatch_attempts + 1)::text || ':' || (chosen.row_version + 1)::text,
         external_job_id = NULL,
         -- block:relay-lock-end
         locked_by = NULL, lock_token = NULL, locked_until = NULL,
         -- end block
         updated_at = coalesce(sqlc.narg('now')::timestamptz, now())
    FROM chosen
   WHERE o.id = chosen.outbox_id
     AND NOT chosen.exhausted
  RETURNING o.attempt_id, o.queue_job_id
),
leased AS (
  UPDATE document_compilation_attempts a
     SET run_state = 'running',
         execution_attempts = a.execution_attempts + 1,
         worker_id = @worker_id::text,
         lease_token = gen_random_uuid(),
         lease_expires_at = coalesce(sqlc.narg('now')::timestamptz, now()) + @lease_duration::interval,
         heartbeat_at = coalesce(sqlc.narg('now')::timestamptz, now()),
         started_at = coalesce(a.started_at, coalesce(sqlc.narg('now')::timestamptz, now())),
         retry_at = NULL,
         queue_job_id = leased_outbox.queue_job_id,
         external_job_id = NULL,
         row_version = a.row_version + 1,
         updated_at = coalesce(sqlc.narg('now')::timestamptz, now())
    FROM leased_outbox
   WHERE a.id = leased_outbox.attempt_id
  RETURNING a.*
),
exhausted_outbox AS (
  UPDATE document_compilation_outbox o
     SET status = 'dead',
         -- block:relay-lock-end
         locked_by = NULL, lock_token = NULL, locked_until = NULL,
         -- end block
         updated_at = coalesce(sqlc.narg('now')::timestamptz, now())
    FROM chosen
   WHERE o.id = chosen.outbox_id
     AND chosen.exhausted
  RETURNING o.attempt_id
),
exhausted AS (
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
    FROM exhausted_outbox
   WHERE a.id = exhausted_outbox.attempt_id
  RETURNING a.*
),
-- A limited tenant's row, locked above, is stamped with this transaction
-- (a cap's count needs it) and its bucket is left with what the leases
-- did not spend, as of now (tokens_at never moves back: a second already
-- refilled is not refilled again).
stamped AS (
  UPDATE document_compilation_tenant_limits l
     SET leased_by_xid = pg_current_xact_id(),
         tokens = capped.tokens - spent.leases,
         tokens_at = CASE WHEN capped.tokens IS NOT NULL
                          THEN greatest(capped.tokens_at, coalesce(sqlc.narg('now')::timestamptz, now())) END,
         updated_at = coalesce(sqlc.narg('now')::timestamptz, now())
    FROM capped
    JOIN (SELECT chosen.tenant_id, count(*) AS leases
            FROM chosen
           WHERE NOT chosen.exhausted
           GROUP BY chosen.tenant_id) spent ON spent.tenant_id = capped.tenant_id
   WHERE l.tenant_id = capped.tenant_id
),
-- A fetch that filled its batch ends its worker's idle registration: the
-- worker is behind and fetches again at once, so commits need not notify
-- it (a notifying commit holds the global notify lock through its WAL
-- flush). One that did not fill it leaves the registration: the worker is
-- keeping up, and the next commit's notification wakes it at once.
awake AS (
  DELETE FROM document_compilation_outbox_idle_listeners l
   WHERE l.listener_id = @worker_id::text
     AND (SELECT count(*) FROM chosen) >= @batch_size::integer
),
-- The two tables' size, FetchTableBytes' reading, for the plan class of
-- the next fetch (repo/plan_class.go): once per statement.
sizes AS (
  SELECT (pg_relation_size('document_compilation_attempts') + pg_relation_size('document_compilation_outbox'))::bigint AS table_bytes
)
-- A lease is progress (async_commit may apply); an exhausted attempt's
-- failure is an outcome, and then the whole commit stays synchronous.
-- With with_trace_contexts, each lease comes with the trace context its
-- Start stored (migration 0009), by primary key, in this round trip; the
-- join's condition is false otherwise, and no row is probed.
SELECT leased.*, false AS exhausted, t.traceparent AS trace_parent, t.tracestate AS trace_state, sizes.table_bytes,
       false AS walk_end
  FROM sizes, leased
  LEFT JOIN document_compilation_trace_contexts t
    ON @with_trace_contexts::boolean AND t.attempt_id = leased.id
 WHERE CASE WHEN @async_commit::boolean AND NOT EXISTS (SELECT 1 FROM exhausted)
            THEN set_config('synchronous_commit', 'off', true) IS NOT NULL ELSE true END
UNION ALL
SELECT exhausted.*, true AS exhausted, NULL::text AS trace_parent, NULL::text AS trace_state, sizes.table_bytes,
       false AS walk_end
  FROM sizes, exhausted
UNION ALL
-- The walk's end, after a fetch that took nothing though its walk stopped
-- at max_tenants (the header says why): no attempt, only tenant_id (the
-- last tenant walked) is meant; the other columns are placeholders, one
-- per column of document_compilation_attempts in its order (a column
-- added to the table needs one here: the UNION refuses the statement
-- until it has it).
SELECT '00000000-0000-0000-0000-000000000000'::uuid, last_walked.tenant_id, '00000000-0000-0000-0000-000000000000'::uuid,
       '00000000-0000-0000-0000-000000000000'::uuid, 0, '00000000-0000-0000-0000-000000000000'::uuid, 0, NULL, NULL,
       '', '', NULL, 0, 0, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, 0,
       'epoch'::timestamptz, 'epoch'::timestamptz, NULL, NULL,
       false, NULL, NULL, sizes.table_bytes, true
  FROM sizes, (SELECT w.tenant_id FROM tenant_walk w ORDER BY w.pos DESC LIMIT 1) last_walked
 WHERE (SELECT max(w.looked) FROM tenant_walk w) >= @max_tenants::integer
   AND NOT EXISTS (SELECT 1 FROM chosen);

-- name: FetchTableBytes :one
-- The size of the two tables FetchLeases reads, in bytes (their main
-- forks: what the planner counts as their pages). repo reads it before a
-- fetch that follows an empty one, to pick the fetch's plan class
-- (repo/plan_class.go); a fetch that leases reads it too (table_bytes).
SELECT (pg_relation_size('document_compilation_attempts') + pg_relation_size('document_compilation_outbox'))::bigint AS table_bytes;
