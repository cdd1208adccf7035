-- Per-tenant caps on running attempts for direct delivery (migration
-- 0008). FetchLeases reads and stamps them; these set them.

-- name: SetTenantLimit :one
-- Caps a tenant, or changes its cap (its stamp is kept: the cap's
-- guarantee never lapses while it changes).
INSERT INTO document_compilation_tenant_limits (tenant_id, max_running, updated_at)
VALUES (@tenant_id::text, @max_running::integer, coalesce(sqlc.narg('now')::timestamptz, now()))
ON CONFLICT (tenant_id) DO UPDATE
   SET max_running = EXCLUDED.max_running,
       updated_at = EXCLUDED.updated_at
RETURNING tenant_id, max_running;

-- name: RemoveTenantLimit :execrows
-- Lifts a tenant's cap.
DELETE FROM document_compilation_tenant_limits l
 WHERE l.tenant_id = @tenant_id::text;

-- name: ListTenantLimits :many
SELECT l.tenant_id, l.max_running
  FROM document_compilation_tenant_limits l
 ORDER BY l.tenant_id;
