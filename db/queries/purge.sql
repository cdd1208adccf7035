-- Retention: Purge deletes a tenant's terminal attempts completed before a
-- cut-off (their outbox rows go by cascade); PurgeTenants pages through
-- the tenants that have some. repo/purge.go runs these statements.

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
