-- Migration 0013: a commit that finds every idle registration held wakes
-- the listeners it names, not every process.
--
-- Migration 0010 takes one registered idle listener per row made due
-- (FOR UPDATE SKIP LOCKED) and names it. When every registration is held
-- by another transaction, it notified everyone, as 0007 did: every
-- listening process woke, the busy ones too, and each fetched. Measured
-- (make bench-fleet, fanout: 50 idle processes, Starts from 8 producers
-- at once, docs/AGEING.md): one Start in eleven found every registration
-- held, nearly always by other commits' own checks (one to three
-- registrations left, each being taken), and each such notification woke
-- about 36 processes. Now the commit names each registration it sees
-- instead (one notification per listener, '<due>|<listener id>' as in
-- 0010), leaving them in place, and notifies everyone only when more than
-- eight are held. Which listeners those are:
--
--   * one refreshing its registration (OutboxListenerIdle): idle; it wakes
--     and looks.
--   * one another commit is taking: that commit wakes it too, but its look
--     may come before this commit is visible. This notification arrives
--     after this commit, so it looks again after it.
--   * one whose fetch filled its batch and is ending the registration: it
--     fetches again as its slots free, after this commit.
--
-- No idle listener is left out that 0010's notification to everyone would
-- have reached: a listener sleeping on LISTEN is registered (0007's
-- handshake), or was taken out by a commit that woke it (it registers
-- again: its new registration waits for this commit's lock, and its look
-- once more comes after this commit), or is registering now (refused
-- while this commit holds the lock, it registers and looks once more
-- after it). So the handshake of 0007 and 0010 still leaves no committed
-- due row unseen. Under REPEATABLE READ or SERIALIZABLE the commit still
-- notifies everyone (0010). Listeners of 0010 read these payloads as
-- 0010's; older ones wake on every notification, as before.
--
-- The check is a function of its own, document_compilation_outbox_wake_named,
-- on two triggers of its own that stand in for 0007's (one transaction:
-- no commit runs between them without a check). 0010's function and
-- 0007's triggers stay, disabled, so the Down only enables them again: a
-- Down that wrote 0010's function again would hold its DELETE, which
-- kfsdb's Down guard refuses (migrate/guard.go).

-- +goose Up
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION "document_compilation_outbox_wake_named"() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path FROM CURRENT AS $$
DECLARE
  target text;
  held text[];
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
    RETURN NULL;
  END IF;
  -- Every registration is held (or none is left): name those this
  -- statement's snapshot sees, up to eight, and take none.
  held := ARRAY(
    SELECT c."listener_id" FROM "document_compilation_outbox_idle_listeners" c
     ORDER BY c."expires_at" DESC, c."listener_id"
     LIMIT 9);
  IF cardinality(held) > 8 THEN
    PERFORM pg_notify('kfsdb_outbox', NEW."available_at"::text);
    RETURN NULL;
  END IF;
  FOREACH target IN ARRAY held LOOP
    PERFORM pg_notify('kfsdb_outbox', NEW."available_at"::text || '|' || target);
  END LOOP;
  RETURN NULL;
END
$$;
-- +goose StatementEnd

-- The same triggers as 0007's, on the new function, under names of their
-- own (kfsdb tells an exported database's version by its objects,
-- migrate/unrecorded.go), and 0007's disabled, not dropped: ENABLE and
-- DISABLE TRIGGER and CREATE TRIGGER take SHARE ROW EXCLUSIVE on the
-- outbox, which lets its readers through; DROP TRIGGER would take ACCESS
-- EXCLUSIVE.
CREATE CONSTRAINT TRIGGER "document_compilation_outbox_wake_named_on_insert"
  AFTER INSERT ON "document_compilation_outbox"
  DEFERRABLE INITIALLY DEFERRED
  FOR EACH ROW
  WHEN (NEW."status" = 'pending' AND NEW."available_at" <> 'infinity')
  EXECUTE FUNCTION "document_compilation_outbox_wake_named"();

CREATE CONSTRAINT TRIGGER "document_compilation_outbox_wake_named_on_update"
  AFTER UPDATE OF "status", "available_at" ON "document_compilation_outbox"
  DEFERRABLE INITIALLY DEFERRED
  FOR EACH ROW
  WHEN (NEW."status" = 'pending' AND NEW."available_at" <> 'infinity'
        AND (OLD."status" <> 'pending' OR OLD."available_at" = 'infinity'))
  EXECUTE FUNCTION "document_compilation_outbox_wake_named"();

ALTER TABLE "document_compilation_outbox"
  DISABLE TRIGGER "document_compilation_outbox_wake_on_insert",
  DISABLE TRIGGER "document_compilation_outbox_wake_on_update";

-- +goose Down
ALTER TABLE "document_compilation_outbox"
  ENABLE TRIGGER "document_compilation_outbox_wake_on_insert",
  ENABLE TRIGGER "document_compilation_outbox_wake_on_update";
DROP TRIGGER IF EXISTS "document_compilation_outbox_wake_named_on_update" ON "document_compilation_outbox";
DROP TRIGGER IF EXISTS "document_compilation_outbox_wake_named_on_insert" ON "document_compilation_outbox";
DROP FUNCTION IF EXISTS "document_compilation_outbox_wake_named"();
