-- Document assets: one row per uploaded document version. Compilation
-- attempts (0006) reference (knowledge_space_id, id, version).

-- +goose Up
CREATE TABLE "document_assets" (
  "id" UUID PRIMARY KEY NOT NULL,
  "knowledge_space_id" UUID NOT NULL
    REFERENCES "knowledge_spaces" ("id") ON DELETE CASCADE,
  "filename" VARCHAR(1024) NOT NULL,
  "mime_type" VARCHAR(255) NOT NULL,
  "object_key" VARCHAR(1024) NOT NULL,
  "sha256" CHAR(64) NOT NULL,
  "size_bytes" BIGINT NOT NULL,
  "version" INTEGER NOT NULL,
  "parser_status" VARCHAR(32) NOT NULL DEFAULT 'pending',
  "metadata" JSONB NOT NULL DEFAULT '{}'::jsonb,
  "created_at" TIMESTAMPTZ NOT NULL DEFAULT now(),
  "updated_at" TIMESTAMPTZ NOT NULL DEFAULT now(),
  CONSTRAINT "document_assets_size_bytes_ck" CHECK ("size_bytes" >= 0),
  CONSTRAINT "document_assets_version_ck" CHECK ("version" > 0)
);

CREATE INDEX "document_assets_knowledge_space_id_idx"
  ON "document_assets" ("knowledge_space_id");

-- +goose Down
DROP TABLE "document_assets";
