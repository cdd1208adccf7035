-- Publication heads: one row per (tenant, space) pointing at the published
-- publication. head_revision is bumped by compare-and-swap on every publish;
-- a compilation attempt records the revision it started from (0006's
-- base_head_revision) and Start refuses a stale one. A space with no row has
-- head revision 0.
--
-- Upstream's 0005 changes nothing 0006 depends on, so it is not reproduced
-- here; goose allows the gap.

-- +goose Up
CREATE TABLE "projection_set_publication_heads" (
  "tenant_id" VARCHAR(255) NOT NULL,
  "knowledge_space_id" UUID NOT NULL
    REFERENCES "knowledge_spaces" ("id") ON DELETE CASCADE,
  "publication_id" UUID NOT NULL,
  "head_revision" INTEGER NOT NULL,
  "created_at" TIMESTAMPTZ NOT NULL DEFAULT now(),
  "updated_at" TIMESTAMPTZ NOT NULL DEFAULT now(),
  PRIMARY KEY ("tenant_id", "knowledge_space_id"),
  CONSTRAINT "projection_set_publication_heads_revision_ck"
    CHECK ("head_revision" >= 0),
  FOREIGN KEY ("tenant_id", "knowledge_space_id", "publication_id")
    REFERENCES "projection_set_publications" ("tenant_id", "knowledge_space_id", "id")
    ON DELETE RESTRICT
);

-- +goose Down
DROP TABLE "projection_set_publication_heads";
