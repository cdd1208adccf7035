-- Migration 0011: per-tenant rate limits and pauses for direct delivery,
-- in migration 0008's table, beside the caps, and held the way the caps
-- are (0008's header): a fetch locks the tenant's row FOR UPDATE SKIP
-- LOCKED, so it alone uses the row while it leases for the tenant.
--
-- A row now caps running attempts (max_running), limits the rate of
-- leases (leases_per_second, with burst), pauses the tenant (paused_at),
-- or any of these together; one that does none of them is deleted, not
-- kept. Without a row a tenant is not limited, as before.
--
-- The rate is a token bucket: burst tokens at most, refilled at
-- leases_per_second, one spent per lease. tokens is what the bucket held
-- at tokens_at (the database clock); a fetch refills it to its own now
-- (document_compilation_tenant_tokens), offers the tenant at most the
-- whole tokens, and writes back what it did not spend, in the row it has
-- locked. A fetch that locks the row after another's commit reads that
-- commit's tokens: READ COMMITTED locks a row's newest version, whatever
-- the statement's snapshot. So over any t seconds a tenant gets at most
-- leases_per_second * t + burst leases from every process together. A
-- fetch's now is its transaction's start, which may be earlier than the
-- tokens_at another fetch wrote; tokens_at never moves back, so no
-- second is refilled twice.
--
-- A paused tenant gets no lease (its exhausted attempts are not failed
-- either) until it is resumed; its attempts and outbox rows are not
-- touched. The walk over tenants passes a paused tenant, and one whose
-- bucket holds less than a token, as one with nothing due.
--
-- Every new column is NULL when it says nothing (paused_at is the pause:
-- NULL when not paused), so the Down's guarded column drops lose nothing
-- when they run, and refuse while a rate or a pause is set. The Up runs
-- again harmlessly (IF NOT EXISTS, each check dropped and added again):
-- it creates no table, index or trigger, so a database whose migrations
-- another tool applied does not show it (migrate's UnrecordedError), and
-- `kfsdb migrate sql --up --from` an earlier version runs it again.

-- +goose Up
ALTER TABLE "document_compilation_tenant_limits"
  ALTER COLUMN "max_running" DROP NOT NULL,
  -- Leases per second; NULL: no rate limit.
  ADD COLUMN IF NOT EXISTS "leases_per_second" NUMERIC,
  -- The most leases at once after a quiet spell (the bucket's size).
  ADD COLUMN IF NOT EXISTS "burst" INTEGER,
  -- The bucket: tokens left at tokens_at.
  ADD COLUMN IF NOT EXISTS "tokens" NUMERIC,
  ADD COLUMN IF NOT EXISTS "tokens_at" TIMESTAMPTZ,
  -- When the tenant was paused; NULL: not paused.
  ADD COLUMN IF NOT EXISTS "paused_at" TIMESTAMPTZ,
  -- Why, as the operator said.
  ADD COLUMN IF NOT EXISTS "pause_reason" TEXT,
  DROP CONSTRAINT IF EXISTS "document_compilation_tenant_limits_rate_ck",
  ADD CONSTRAINT "document_compilation_tenant_limits_rate_ck"
    CHECK ("leases_per_second" > 0),
  DROP CONSTRAINT IF EXISTS "document_compilation_tenant_limits_burst_ck",
  ADD CONSTRAINT "document_compilation_tenant_limits_burst_ck"
    CHECK ("burst" >= 1),
  -- A rate comes with its burst and its bucket, and the bucket holds
  -- 0..burst tokens.
  DROP CONSTRAINT IF EXISTS "document_compilation_tenant_limits_bucket_ck",
  ADD CONSTRAINT "document_compilation_tenant_limits_bucket_ck"
    CHECK (("leases_per_second" IS NULL AND "burst" IS NULL AND "tokens" IS NULL AND "tokens_at" IS NULL)
           OR ("leases_per_second" IS NOT NULL AND "burst" IS NOT NULL AND "tokens" IS NOT NULL AND "tokens_at" IS NOT NULL
               AND "tokens" >= 0 AND "tokens" <= "burst")),
  DROP CONSTRAINT IF EXISTS "document_compilation_tenant_limits_pause_reason_ck",
  ADD CONSTRAINT "document_compilation_tenant_limits_pause_reason_ck"
    CHECK ("pause_reason" IS NULL OR ("paused_at" IS NOT NULL AND char_length("pause_reason") <= 1024)),
  -- A row limits something.
  DROP CONSTRAINT IF EXISTS "document_compilation_tenant_limits_limits_ck",
  ADD CONSTRAINT "document_compilation_tenant_limits_limits_ck"
    CHECK ("max_running" IS NOT NULL OR "leases_per_second" IS NOT NULL OR "paused_at" IS NOT NULL);

-- The bucket refilled to at_time: NULL without a rate. Inlined by the
-- planner (one SQL expression, each argument used once).
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION "document_compilation_tenant_tokens"(
  tokens NUMERIC, burst INTEGER, leases_per_second NUMERIC, tokens_at TIMESTAMPTZ, at_time TIMESTAMPTZ)
RETURNS NUMERIC
LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$
  SELECT least(burst::numeric, tokens + leases_per_second * greatest(0, extract(epoch FROM at_time - tokens_at)))
$$;
-- +goose StatementEnd

-- +goose Down
DROP FUNCTION IF EXISTS "document_compilation_tenant_tokens"(NUMERIC, INTEGER, NUMERIC, TIMESTAMPTZ, TIMESTAMPTZ);
ALTER TABLE "document_compilation_tenant_limits" DROP CONSTRAINT IF EXISTS "document_compilation_tenant_limits_limits_ck";
ALTER TABLE "document_compilation_tenant_limits" DROP CONSTRAINT IF EXISTS "document_compilation_tenant_limits_pause_reason_ck";
ALTER TABLE "document_compilation_tenant_limits" DROP CONSTRAINT IF EXISTS "document_compilation_tenant_limits_bucket_ck";
ALTER TABLE "document_compilation_tenant_limits" DROP CONSTRAINT IF EXISTS "document_compilation_tenant_limits_burst_ck";
ALTER TABLE "document_compilation_tenant_limits" DROP CONSTRAINT IF EXISTS "document_compilation_tenant_limits_rate_ck";
-- The operator's settings first, so that a refusal names them; the rest
-- hold values only beside them.
ALTER TABLE "document_compilation_tenant_limits" DROP COLUMN IF EXISTS "paused_at";
ALTER TABLE "document_compilation_tenant_limits" DROP COLUMN IF EXISTS "leases_per_second";
ALTER TABLE "document_compilation_tenant_limits" DROP COLUMN IF EXISTS "pause_reason";
ALTER TABLE "document_compilation_tenant_limits" DROP COLUMN IF EXISTS "burst";
ALTER TABLE "document_compilation_tenant_limits" DROP COLUMN IF EXISTS "tokens";
ALTER TABLE "document_compilation_tenant_limits" DROP COLUMN IF EXISTS "tokens_at";
-- Past the guards every row has a cap (the limits check above); with
-- --allow-data-loss a row that only paused or rate-limited its tenant
-- stops the Down here (clear it first: kfsdb tenant resume, clear-rate).
ALTER TABLE "document_compilation_tenant_limits" ALTER COLUMN "max_running" SET NOT NULL;
