-- Knowledge spaces: the tenant-scoped container every document belongs to.
-- tenant_id starts as TEXT, as upstream created it; 0006 narrows it to
-- VARCHAR(255) after checking that no existing row is longer.

-- +goose Up
CREATE TABLE "knowledge_spaces" (
  "id" UUID PRIMARY KEY NOT NULL,
  "tenant_id" TEXT NOT NULL,
  "slug" VARCHAR(128) NOT NULL,
  "name" VARCHAR(255) NOT NULL,
  "description" TEXT,
  "created_at" TIMESTAMPTZ NOT NULL DEFAULT now(),
  "updated_at" TIMESTAMPTZ NOT NULL DEFAULT now(),
  CONSTRAINT "knowledge_spaces_tenant_slug_uq" UNIQUE ("tenant_id", "slug")
);

-- +goose Down
DROP TABLE "knowledge_spaces";
