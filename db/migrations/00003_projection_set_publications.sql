-- Projection set publications: compiled projection sets of a space. A
-- compilation attempt binds a candidate publication of its own tenant and
-- space (0006's composite foreign key needs the (tenant, space, id) key).

-- +goose Up
CREATE TABLE "projection_set_publications" (
  "id" UUID PRIMARY KEY NOT NULL,
  "tenant_id" VARCHAR(255) NOT NULL,
  "knowledge_space_id" UUID NOT NULL
    REFERENCES "knowledge_spaces" ("id") ON DELETE CASCADE,
  "fingerprint" VARCHAR(86) NOT NULL,
  "projection_version" INTEGER NOT NULL,
  "status" VARCHAR(16) NOT NULL,
  "superseded_by_fingerprint" VARCHAR(86),
  "metadata" JSONB NOT NULL DEFAULT '{}'::jsonb,
  "created_at" TIMESTAMPTZ NOT NULL DEFAULT now(),
  "updated_at" TIMESTAMPTZ NOT NULL DEFAULT now(),
  CONSTRAINT "projection_set_publications_status_ck"
    CHECK ("status" IN ('candidate', 'validating', 'published', 'inactive', 'superseded')),
  CONSTRAINT "projection_set_publications_fingerprint_uq"
    UNIQUE ("tenant_id", "knowledge_space_id", "fingerprint"),
  CONSTRAINT "projection_set_publications_space_id_uq"
    UNIQUE ("tenant_id", "knowledge_space_id", "id")
);

-- +goose Down
DROP TABLE "projection_set_publications";
