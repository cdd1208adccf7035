-- Migration 0012: an opt-in notification when an attempt ends.
--
-- Another process learns that an attempt finished without polling its
-- row: when a transition ends an attempt (completed_at set: succeeded,
-- failed, canceled or superseded, whoever wrote it: a worker, a fetch that
-- found it exhausted, the relay's dead-letter, an operator's cancel), the
-- trigger below notifies channel kfsdb_outcomes, delivered at the
-- transaction's commit, with a JSON payload:
--
--   {"attempt_id": "<uuid>", "tenant_id": "...", "run_state": "succeeded",
--    "error_code": null}
--
-- (JSON, not a separated list: a tenant id and an error code may hold any
-- character.) Package outcomes listens and parses it; any LISTEN client
-- can. A RetryFailed that reopens a failed attempt clears completed_at, so
-- its next end notifies again. Purge deletes rows and notifies nothing.
--
-- Off by default, and off costs nothing: the trigger is created DISABLED,
-- and PostgreSQL skips a disabled trigger without evaluating its WHEN. On,
-- it costs every terminal commit PostgreSQL's global notify lock, which a
-- notifying commit holds through its WAL flush (see 0007): notifying
-- commits of the whole cluster are serialized (docs/PERFORMANCE.md,
-- "Outcome notifications", measures it). The table's owner turns it on
-- and off (outcomes.Enable and outcomes.Disable run the same statement
-- under a lock_timeout):
--
--   SET lock_timeout = '5s';
--   ALTER TABLE "document_compilation_attempts"
--     ENABLE TRIGGER "document_compilation_attempts_outcome_notify";
--
-- ALTER TABLE ... ENABLE/DISABLE TRIGGER takes a SHARE ROW EXCLUSIVE lock
-- on the table for an instant (as this migration's CREATE TRIGGER does):
-- it waits for transactions writing attempts, and writers queue behind it
-- while it waits, hence the lock_timeout. The state survives dumps
-- (pg_dump restores a disabled trigger as disabled) and is per database.

-- +goose Up
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION "document_compilation_attempts_outcome_notify"() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
  PERFORM pg_catalog.pg_notify('kfsdb_outcomes', pg_catalog.json_build_object(
    'attempt_id', NEW."id",
    'tenant_id', NEW."tenant_id",
    'run_state', NEW."run_state",
    'error_code', NEW."last_error_code")::text);
  RETURN NULL;
END
$$;
-- +goose StatementEnd

-- Only statements that set completed_at run the WHEN, and it passes only
-- when the attempt ends (the seed's checks tie completed_at to the
-- terminal states): heartbeats, advances and retries never fire it.
CREATE TRIGGER "document_compilation_attempts_outcome_notify"
  AFTER UPDATE OF "completed_at" ON "document_compilation_attempts"
  FOR EACH ROW
  WHEN (OLD."completed_at" IS NULL AND NEW."completed_at" IS NOT NULL)
  EXECUTE FUNCTION "document_compilation_attempts_outcome_notify"();

ALTER TABLE "document_compilation_attempts"
  DISABLE TRIGGER "document_compilation_attempts_outcome_notify";

-- +goose Down
DROP TRIGGER IF EXISTS "document_compilation_attempts_outcome_notify" ON "document_compilation_attempts";
DROP FUNCTION IF EXISTS "document_compilation_attempts_outcome_notify"();
