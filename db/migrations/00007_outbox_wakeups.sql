-- Migration 0007: wake-ups for idle relays, decided at commit.
--
-- A row that becomes due (an outbox row inserted pending, or moved to
-- pending from another status or from 'infinity') must wake an idle relay
-- as soon as it is visible, which is at its transaction's commit, possibly
-- long after the statement that wrote it (a Start in the caller's own
-- transaction). Notifying on every such commit is not an option: a
-- notifying commit holds PostgreSQL's global notify lock through its WAL
-- flush, so it would serialize every Start. So only idle relays are woken,
-- and the check runs at commit:
--
--   * A relay that finds nothing to claim registers a row in
--     document_compilation_outbox_idle_listeners while holding the wake-up
--     lock exclusively (pg_try_advisory_xact_lock, never waiting), then
--     claims once more, and only then sleeps on LISTEN kfsdb_outbox. Its
--     next successful claim deletes the row.
--   * The deferred trigger below runs when a transaction that made a row due
--     commits: it takes the same lock shared, so it waits for a registration
--     in progress, and then (a fresh snapshot: plpgsql takes one per
--     statement) notifies when any relay is registered idle.
--
-- Either the committing transaction held the shared lock before a relay's
-- registration took it (the registration is refused, or the relay's claim
-- after it sees the row), or it took the lock after the registration
-- committed, and then sees the relay and notifies. No interleaving leaves a
-- committed due row unseen by an idle relay. A busy relay registers nothing,
-- so under load no commit notifies. Key (1801876324, 1) is 'kfsd', outbox
-- wake-ups; the lock is held only for the instant of a commit or a
-- registration, never across a caller's transaction.

-- +goose Up
CREATE TABLE IF NOT EXISTS "document_compilation_outbox_idle_listeners" (
  -- The relay (Config.ID) sleeping on LISTEN kfsdb_outbox.
  "listener_id" VARCHAR(255) PRIMARY KEY NOT NULL,
  -- A relay refreshes its row at every idle poll; a row past this time
  -- belongs to a relay that died asleep and is deleted by the next
  -- registration. Until then it only costs notifications.
  "expires_at" TIMESTAMPTZ NOT NULL
);

-- +goose StatementBegin
-- SECURITY DEFINER, with the migration's search_path pinned: the check
-- runs with the owner's rights, so a committing transaction never fails
-- for want of a grant on the idle table (an application role that was not
-- given one after this migration still starts attempts; only its relays
-- cannot register and fall back to polling).
CREATE OR REPLACE FUNCTION "document_compilation_outbox_wake"() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path FROM CURRENT AS $$
BEGIN
  PERFORM pg_advisory_xact_lock_shared(1801876324, 1);
  -- Under REPEATABLE READ or SERIALIZABLE the check below would read the
  -- transaction's old snapshot and could miss a relay that went idle
  -- since: such a transaction always notifies.
  IF current_setting('transaction_isolation') <> 'read committed'
     OR EXISTS (SELECT 1 FROM "document_compilation_outbox_idle_listeners") THEN
    -- The payload is when the row is due; identical notifications of one
    -- transaction are folded into one by PostgreSQL.
    PERFORM pg_notify('kfsdb_outbox', NEW."available_at"::text);
  END IF;
  RETURN NULL;
END
$$;
-- +goose StatementEnd

-- Deferred: the check runs at commit, when the row becomes visible.
CREATE CONSTRAINT TRIGGER "document_compilation_outbox_wake_on_insert"
  AFTER INSERT ON "document_compilation_outbox"
  DEFERRABLE INITIALLY DEFERRED
  FOR EACH ROW
  WHEN (NEW."status" = 'pending' AND NEW."available_at" <> 'infinity')
  EXECUTE FUNCTION "document_compilation_outbox_wake"();

-- Pending again: ReleaseDeferred, RetryFailed, ScheduleRetry and a relay's
-- backoff. Heartbeats and the relay's own marks do not fire it.
CREATE CONSTRAINT TRIGGER "document_compilation_outbox_wake_on_update"
  AFTER UPDATE OF "status", "available_at" ON "document_compilation_outbox"
  DEFERRABLE INITIALLY DEFERRED
  FOR EACH ROW
  WHEN (NEW."status" = 'pending' AND NEW."available_at" <> 'infinity'
        AND (OLD."status" <> 'pending' OR OLD."available_at" = 'infinity'))
  EXECUTE FUNCTION "document_compilation_outbox_wake"();

-- +goose Down
DROP TRIGGER IF EXISTS "document_compilation_outbox_wake_on_update" ON "document_compilation_outbox";
DROP TRIGGER IF EXISTS "document_compilation_outbox_wake_on_insert" ON "document_compilation_outbox";
DROP FUNCTION IF EXISTS "document_compilation_outbox_wake"();
DROP TABLE IF EXISTS "document_compilation_outbox_idle_listeners";
