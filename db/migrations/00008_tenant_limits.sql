-- Migration 0008: optional per-tenant caps on running attempts for direct
-- delivery (repo.FetchLeases, package pgsource).
--
-- A tenant without a row here is not capped. For a tenant with one, a
-- fetch leases no more than max_running minus the tenant's live leases,
-- and the cap holds across any number of processes:
--
--   * A fetch locks the tenant's row FOR UPDATE SKIP LOCKED: while one
--     fetch is leasing for the tenant, another skips the tenant (it never
--     waits), so two fetches never count the same free places.
--   * A fetch that leased for the tenant stamps the row with its own
--     transaction id (leased_by_xid). The next fetch's count of live leases
--     comes from its statement's snapshot, which may predate that commit
--     (it took its snapshot before, and the lock after, the commit): it
--     then finds the stamp not visible in its snapshot and skips the
--     tenant this once, rather than count without those leases.
--
-- Leases taken through the relay path (AcquireLease after a broker's
-- delivery) are counted as live leases but are not capped themselves.

-- +goose Up
CREATE TABLE IF NOT EXISTS "document_compilation_tenant_limits" (
  "tenant_id" VARCHAR(255) PRIMARY KEY NOT NULL,
  "max_running" INTEGER NOT NULL,
  -- The transaction of the last fetch that leased for this tenant.
  "leased_by_xid" xid8,
  "updated_at" TIMESTAMPTZ NOT NULL,
  CONSTRAINT "document_compilation_tenant_limits_max_running_ck"
    CHECK ("max_running" > 0)
);

-- +goose Down
DROP TABLE IF EXISTS "document_compilation_tenant_limits";
