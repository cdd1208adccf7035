-- Per-tenant limits of direct delivery: caps on running attempts
-- (migration 0008), rates and pauses (migration 0011). FetchLeases reads,
-- stamps and spends them; these set them. A row that no longer limits
-- anything is deleted by the statement that lifted its last limit
-- (LiftTenantLimit locks the row first, FOR UPDATE, waiting for a fetch's
-- short transaction, then updates or deletes it by what the locked,
-- newest version holds).

-- name: SetTenantLimit :one
-- Caps a tenant, or changes its cap (its stamp is kept: the cap's
-- guarantee never lapses while it changes).
INSERT INTO document_compilation_tenant_limits (tenant_id, max_running, updated_at)
VALUES (@tenant_id::text, @max_running::integer, coalesce(sqlc.narg('now')::timestamptz, now()))
ON CONFLICT (tenant_id) DO UPDATE
   SET max_running = EXCLUDED.max_running,
       updated_at = EXCLUDED.updated_at
RETURNING tenant_id, max_running;

-- name: SetTenantRate :exec
-- Limits a tenant to leases_per_second leases, burst at once, or changes
-- its rate. A new bucket starts full; a changed one is first refilled to
-- now at the old rate, then holds at most the new burst.
INSERT INTO document_compilation_tenant_limits AS l (tenant_id, leases_per_second, burst, tokens, tokens_at, updated_at)
VALUES (@tenant_id::text, @leases_per_second::numeric, @burst::integer, @burst::integer,
        coalesce(sqlc.narg('now')::timestamptz, now()), coalesce(sqlc.narg('now')::timestamptz, now()))
ON CONFLICT (tenant_id) DO UPDATE
   SET leases_per_second = EXCLUDED.leases_per_second,
       burst = EXCLUDED.burst,
       tokens = CASE WHEN l.leases_per_second IS NULL THEN EXCLUDED.tokens
                     ELSE least(EXCLUDED.burst::numeric,
                                document_compilation_tenant_tokens(l.tokens, l.burst, l.leases_per_second, l.tokens_at, EXCLUDED.tokens_at)) END,
       tokens_at = CASE WHEN l.leases_per_second IS NULL THEN EXCLUDED.tokens_at
                        ELSE greatest(l.tokens_at, EXCLUDED.tokens_at) END,
       updated_at = EXCLUDED.updated_at;

-- name: LiftTenantLimit :one
-- Lifts one of a tenant's limits, named by limit_kind: 'cap'
-- (RemoveTenantLimit), 'rate' (RemoveTenantRate) or 'pause'
-- (ResumeTenant). lifted is 0 when the tenant had no such limit. Idle
-- sources are woken (a notification naming no listener, migration 0007's
-- form), so what the limit held back is fetched at once.
WITH cur AS (
  SELECT l.tenant_id,
         -- Whether the row limits anything else: else it is deleted.
         CASE @limit_kind::text
           WHEN 'cap' THEN l.leases_per_second IS NOT NULL OR l.paused_at IS NOT NULL
           WHEN 'rate' THEN l.max_running IS NOT NULL OR l.paused_at IS NOT NULL
           ELSE l.max_running IS NOT NULL OR l.leases_per_second IS NOT NULL
         END AS kept
    FROM document_compilation_tenant_limits l
   WHERE l.tenant_id = @tenant_id::text
     AND CASE @limit_kind::text
           WHEN 'cap' THEN l.max_running IS NOT NULL
           WHEN 'rate' THEN l.leases_per_second IS NOT NULL
           WHEN 'pause' THEN l.paused_at IS NOT NULL
         END
     FOR UPDATE
),
kept AS (
  UPDATE document_compilation_tenant_limits l
     SET max_running = CASE WHEN @limit_kind::text = 'cap' THEN NULL ELSE l.max_running END,
         leases_per_second = CASE WHEN @limit_kind::text = 'rate' THEN NULL ELSE l.leases_per_second END,
         burst = CASE WHEN @limit_kind::text = 'rate' THEN NULL ELSE l.burst END,
         tokens = CASE WHEN @limit_kind::text = 'rate' THEN NULL ELSE l.tokens END,
         tokens_at = CASE WHEN @limit_kind::text = 'rate' THEN NULL ELSE l.tokens_at END,
         paused_at = CASE WHEN @limit_kind::text = 'pause' THEN NULL ELSE l.paused_at END,
         pause_reason = CASE WHEN @limit_kind::text = 'pause' THEN NULL ELSE l.pause_reason END,
         updated_at = coalesce(sqlc.narg('now')::timestamptz, now())
    FROM cur
   WHERE l.tenant_id = cur.tenant_id
     AND cur.kept
  RETURNING l.tenant_id
),
dropped AS (
  DELETE FROM document_compilation_tenant_limits l
   USING cur
   WHERE l.tenant_id = cur.tenant_id
     AND NOT cur.kept
  RETURNING l.tenant_id
),
lifted AS (
  SELECT tenant_id FROM kept UNION ALL SELECT tenant_id FROM dropped
)
SELECT (SELECT count(*) FROM lifted)::integer AS lifted,
       (SELECT count(*) FROM lifted WHERE pg_notify('kfsdb_outbox', now()::text) IS NOT NULL)::integer AS woken;

-- name: PauseTenant :many
-- Pauses a tenant: no fetch leases its attempts until ResumeTenant. No
-- row when it was paused already (its pause, time and reason, stays).
INSERT INTO document_compilation_tenant_limits AS l (tenant_id, paused_at, pause_reason, updated_at)
VALUES (@tenant_id::text, coalesce(sqlc.narg('now')::timestamptz, now()), sqlc.narg('reason')::text,
        coalesce(sqlc.narg('now')::timestamptz, now()))
ON CONFLICT (tenant_id) DO UPDATE
   SET paused_at = EXCLUDED.paused_at,
       pause_reason = EXCLUDED.pause_reason,
       updated_at = EXCLUDED.updated_at
 WHERE l.paused_at IS NULL
RETURNING l.paused_at;

-- name: ListTenantLimits :many
-- Every tenant's limits (or tenant_id's alone), by tenant id, the bucket
-- refilled to now. Not a hot read: one row per limited tenant.
SELECT l.tenant_id, l.max_running, l.leases_per_second, l.burst,
       -- 0 without a rate.
       coalesce(document_compilation_tenant_tokens(l.tokens, l.burst, l.leases_per_second, l.tokens_at,
                                                   coalesce(sqlc.narg('now')::timestamptz, now())), 0)::numeric AS tokens,
       l.paused_at, l.pause_reason
  FROM document_compilation_tenant_limits l
 WHERE sqlc.narg('tenant_id')::text IS NULL OR l.tenant_id = sqlc.narg('tenant_id')::text
 ORDER BY l.tenant_id;

-- name: CountTenantLimits :one
-- How many tenants are capped, rate-limited and paused (the metrics'
-- gauges): one pass over the table, one row per limited tenant.
SELECT count(*) FILTER (WHERE l.max_running IS NOT NULL) AS capped,
       count(*) FILTER (WHERE l.leases_per_second IS NOT NULL) AS rate_limited,
       count(*) FILTER (WHERE l.paused_at IS NOT NULL) AS paused
  FROM document_compilation_tenant_limits l;
