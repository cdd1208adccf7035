-- kfsdb console and operator roles: least privilege for `kfsdb console`
-- and the operator commands (`kfsdb attempts`, `outbox stats`, `stuck`).
--
-- Not a migration. Run it once per database, as the owner of kfsdb's
-- tables, after `migrate up` (like app_role.sql), then give each login
-- role a password:
--
--   psql "$OWNER_DATABASE_URL" -v ON_ERROR_STOP=1 -f db/roles/console_roles.sql
--   psql "$OWNER_DATABASE_URL" -c "\password kfsdb_console_ro"
--   psql "$OWNER_DATABASE_URL" -c "\password kfsdb_operator"
--
-- kfsdb_console_ro: what `kfsdb console --read-only`, `kfsdb attempts
--   list|show`, `kfsdb outbox stats` and `kfsdb stuck` need: SELECT on the
--   attempts and the outbox, nothing else (no tenant limits, no trace
--   contexts, no idle listeners, no platform table, no write).
-- kfsdb_operator: the same, and UPDATE on the two tables, which cancel,
--   retry and supersede need (each is an UPDATE of the attempt and of its
--   outbox row); no INSERT, no DELETE.
--
-- Neither owns anything nor bypasses row-level security. tests/privilege
-- runs the console and the commands under each and proves the rest is
-- refused. Running the file again is harmless.

DO $$
BEGIN
  IF NOT EXISTS (SELECT FROM pg_catalog.pg_roles WHERE rolname = 'kfsdb_console_ro') THEN
    CREATE ROLE kfsdb_console_ro LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE NOREPLICATION NOBYPASSRLS;
  END IF;
  IF NOT EXISTS (SELECT FROM pg_catalog.pg_roles WHERE rolname = 'kfsdb_operator') THEN
    CREATE ROLE kfsdb_operator LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE NOREPLICATION NOBYPASSRLS;
  END IF;
END
$$;

REVOKE CREATE ON SCHEMA public FROM PUBLIC;
GRANT USAGE ON SCHEMA public TO kfsdb_console_ro, kfsdb_operator;

GRANT SELECT
  ON TABLE document_compilation_attempts, document_compilation_outbox
  TO kfsdb_console_ro, kfsdb_operator;

GRANT UPDATE
  ON TABLE document_compilation_attempts, document_compilation_outbox
  TO kfsdb_operator;
