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

-- Row-level security for a confined console (kfsdb console --tenant T):
-- its connections set kfsdb.tenant = T (kfsdb console sends it as a
-- startup parameter), and then the two roles above read and change only
-- T's attempts and their outbox rows, even through a query that forgot
-- the tenant filter. With kfsdb.tenant unset or empty (an unconfined
-- console, the operator commands) they see every tenant. Every other role
-- gets a permissive USING (true) policy, which the planner folds away:
-- the application role's statements cost what they did. The table owner
-- bypasses row-level security (it is not FORCEd).
ALTER TABLE document_compilation_attempts ENABLE ROW LEVEL SECURITY;
ALTER TABLE document_compilation_outbox ENABLE ROW LEVEL SECURITY;

DROP POLICY IF EXISTS kfsdb_every_row ON document_compilation_attempts;
CREATE POLICY kfsdb_every_row ON document_compilation_attempts USING (true) WITH CHECK (true);
DROP POLICY IF EXISTS kfsdb_every_row ON document_compilation_outbox;
CREATE POLICY kfsdb_every_row ON document_compilation_outbox USING (true) WITH CHECK (true);

-- The test is a PL/pgSQL function, not an inline expression: the planner
-- estimates an inline "setting = tenant_id" to pass 1 row in 200 and then
-- reads a tenant's whole range and sorts it rather than walk its index to
-- the LIMIT (the attempts list page: 1.8 ms as the owner, 24 ms under the
-- inline policy); a function is estimated to pass a third.
CREATE OR REPLACE FUNCTION kfsdb_console_tenant_visible(tenant text) RETURNS boolean
  LANGUAGE plpgsql STABLE PARALLEL SAFE
  AS $fn$ BEGIN RETURN coalesce(current_setting('kfsdb.tenant', true), '') IN ('', tenant); END $fn$;

DROP POLICY IF EXISTS kfsdb_console_tenant ON document_compilation_attempts;
CREATE POLICY kfsdb_console_tenant ON document_compilation_attempts AS RESTRICTIVE
  TO kfsdb_console_ro, kfsdb_operator
  USING (kfsdb_console_tenant_visible(tenant_id));
-- The outbox has no tenant column: a row is its attempt's tenant's (the
-- subquery is itself under the attempts' policy).
DROP POLICY IF EXISTS kfsdb_console_tenant ON document_compilation_outbox;
CREATE POLICY kfsdb_console_tenant ON document_compilation_outbox AS RESTRICTIVE
  TO kfsdb_console_ro, kfsdb_operator
  USING (coalesce(current_setting('kfsdb.tenant', true), '') = ''
         OR EXISTS (SELECT FROM document_compilation_attempts a WHERE a.id = attempt_id));
