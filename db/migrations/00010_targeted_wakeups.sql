-- Migration 0010: a commit wakes one idle listener per row it made due,
-- not every one.
--
-- Migration 0007 notified the channel kfsdb_outbox, which every listening
-- session receives: with a fleet of idle worker processes (each source
-- and relay its own LISTEN), every Start woke every one of them, and each
-- fetched; one found the row, the others nothing (issue 40: 50 processes,
-- about 50 fetches per Start). Now the check at commit takes one
-- registered idle listener out of document_compilation_outbox_idle_listeners,
-- the one refreshed last (the latest expires_at: a listener that died
-- asleep stops refreshing, so its row is the last taken), and names it in the
-- payload, '<due time>|<listener id>'; listeners ignore a notification
-- that names another (internal/pglisten). A transaction that made k rows
-- due wakes up to k listeners (the trigger runs once per row, and a
-- listener taken out is not taken again). The woken listener registers
-- again before it sleeps, and a new registration looks once more, so the
-- handshake of 0007 still leaves no committed due row unseen:
--
--   * A listener whose row another transaction has locked (its own
--     refresh, its fetch ending the registration, or another commit
--     taking it) is skipped. When only such rows are left, the commit
--     notifies as 0007 did, naming nobody: every listener wakes.
--   * Under REPEATABLE READ or SERIALIZABLE the check could read an old
--     snapshot: such a transaction notifies every listener, as in 0007.
--
-- A listener of a kfsdb before this migration reads any payload it cannot
-- parse as "due now" and wakes on every notification, as before; one of
-- this version reads 0007's payload (a due time alone) as naming everyone.

-- +goose Up
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION "document_compilation_outbox_wake"() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path FROM CURRENT AS $$
DECLARE
  target text;
BEGIN
  PERFORM pg_advisory_xact_lock_shared(1801876324, 1);
  IF current_setting('transaction_isolation') <> 'read committed' THEN
    PERFORM pg_notify('kfsdb_outbox', NEW."available_at"::text);
    RETURN NULL;
  END IF;
  DELETE FROM "document_compilation_outbox_idle_listeners" l
   WHERE l."listener_id" = (
     SELECT c."listener_id" FROM "document_compilation_outbox_idle_listeners" c
      ORDER BY c."expires_at" DESC, c."listener_id"
      LIMIT 1
        FOR UPDATE SKIP LOCKED)
  RETURNING l."listener_id" INTO target;
  IF target IS NOT NULL THEN
    PERFORM pg_notify('kfsdb_outbox', NEW."available_at"::text || '|' || target);
  ELSIF EXISTS (SELECT 1 FROM "document_compilation_outbox_idle_listeners") THEN
    PERFORM pg_notify('kfsdb_outbox', NEW."available_at"::text);
  END IF;
  RETURN NULL;
END
$$;
-- +goose StatementEnd

-- +goose Down
-- +goose StatementBegin
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
