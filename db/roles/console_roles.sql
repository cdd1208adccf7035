-- kfsdb console and operator roles: least privilege for `kfsdb console`
-- and the operator commands (`kfsdb attempts`, `outbox stats`, `stuck`),
-- and confined consoles that see one tenant whatever their session does.
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
--   list|show`, `kfsdb outbox stats`, `kfsdb stuck` and `kfsdb tenant
--   limits` need: SELECT on the attempts, the outbox and the tenants'
--   limits (caps, rates, pauses), nothing else (no trace contexts, no idle
--   listeners, no platform table, no write). Every tenant's rows.
-- kfsdb_operator: the same, and UPDATE on the attempts and the outbox,
--   which cancel, retry and supersede need (each is an UPDATE of the
--   attempt and of its outbox row; no INSERT, no DELETE), and INSERT,
--   UPDATE and DELETE on the tenants' limits, which `kfsdb tenant
--   set-limit|clear-limit|pause|resume` need. Every tenant's rows.
--
-- A confined console (`kfsdb console --tenant T`) connects as a login role
-- of its own, made for T by the procedure this file installs:
--
--   psql "$OWNER_DATABASE_URL" -c "CALL kfsdb_confine_console('kfsdb_console_acme', 'acme', false)"
--   psql "$OWNER_DATABASE_URL" -c "\password kfsdb_console_acme"
--
-- (true as the third argument: the role may also cancel, retry and
-- supersede.) The procedure creates the login role if it is missing,
-- makes it a member of kfsdb_console_confined (SELECT) or
-- kfsdb_console_confined_operator (SELECT, UPDATE), and records role -> T
-- in kfsdb_console_confinement, which no console role can write. Row-level
-- security then shows the role T's attempts and outbox rows only, by its
-- name (current_user), not by anything its session can SET, RESET or
-- set_config. It refuses a role that is a superuser, has BYPASSRLS, owns
-- the tables (or is a member of their owner), is a member of any other
-- role with privileges on them, or is already confined to another tenant.
-- Calling it again with the same arguments changes nothing. `kfsdb console
-- --tenant T` checks all of this again at start and refuses to serve on a
-- role that could read another tenant; `kfsdb console` without --tenant
-- refuses a confined role.
--
-- No role here owns anything or bypasses row-level security.
-- tests/privilege runs the console and the commands under each and proves
-- the rest is refused, and tries every way out of the confinement it
-- knows. Running the file again is harmless.

DO $$
BEGIN
  IF NOT EXISTS (SELECT FROM pg_catalog.pg_roles WHERE rolname = 'kfsdb_console_ro') THEN
    CREATE ROLE kfsdb_console_ro LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE NOREPLICATION NOBYPASSRLS;
  END IF;
  IF NOT EXISTS (SELECT FROM pg_catalog.pg_roles WHERE rolname = 'kfsdb_operator') THEN
    CREATE ROLE kfsdb_operator LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE NOREPLICATION NOBYPASSRLS;
  END IF;
  -- Groups, not logins: their members are the confined consoles' roles.
  IF NOT EXISTS (SELECT FROM pg_catalog.pg_roles WHERE rolname = 'kfsdb_console_confined') THEN
    CREATE ROLE kfsdb_console_confined NOLOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE NOREPLICATION NOBYPASSRLS;
  END IF;
  IF NOT EXISTS (SELECT FROM pg_catalog.pg_roles WHERE rolname = 'kfsdb_console_confined_operator') THEN
    CREATE ROLE kfsdb_console_confined_operator NOLOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE NOREPLICATION NOBYPASSRLS;
  END IF;
END
$$;

REVOKE CREATE ON SCHEMA public FROM PUBLIC;
GRANT USAGE ON SCHEMA public
  TO kfsdb_console_ro, kfsdb_operator, kfsdb_console_confined, kfsdb_console_confined_operator;

GRANT SELECT
  ON TABLE document_compilation_attempts, document_compilation_outbox
  TO kfsdb_console_ro, kfsdb_operator, kfsdb_console_confined, kfsdb_console_confined_operator;

GRANT UPDATE
  ON TABLE document_compilation_attempts, document_compilation_outbox
  TO kfsdb_operator, kfsdb_console_confined_operator;

-- The tenants' limits of direct delivery (migrations 0008 and 0011): every
-- tenant's, for the unconfined roles only. A confined console reads and
-- sets none (the table has no row-level security).
GRANT SELECT ON TABLE document_compilation_tenant_limits TO kfsdb_console_ro, kfsdb_operator;
GRANT INSERT, UPDATE, DELETE ON TABLE document_compilation_tenant_limits TO kfsdb_operator;

-- Which tenant each confined console's role sees. Only the owner writes
-- it; every role reads its own row (and only that), so that `kfsdb
-- console` can check its role at start and the policies below can look
-- the tenant up as the querying role.
CREATE TABLE IF NOT EXISTS kfsdb_console_confinement (
  role_name name PRIMARY KEY,
  tenant_id text NOT NULL CHECK (tenant_id <> '' AND char_length(tenant_id) <= 255)
);
REVOKE ALL ON TABLE kfsdb_console_confinement FROM PUBLIC;
GRANT SELECT ON TABLE kfsdb_console_confinement TO PUBLIC;
ALTER TABLE kfsdb_console_confinement ENABLE ROW LEVEL SECURITY;
DROP POLICY IF EXISTS kfsdb_own_row ON kfsdb_console_confinement;
CREATE POLICY kfsdb_own_row ON kfsdb_console_confinement FOR SELECT USING (role_name = current_user);

-- Row-level security. Every role gets a permissive USING (true) policy,
-- which the planner folds away: the application role's statements, and
-- the unconfined console roles', cost what they did. The table owner
-- bypasses row-level security (it is not FORCEd), which is why a confined
-- console may not run as the owner.
ALTER TABLE document_compilation_attempts ENABLE ROW LEVEL SECURITY;
ALTER TABLE document_compilation_outbox ENABLE ROW LEVEL SECURITY;

DROP POLICY IF EXISTS kfsdb_every_row ON document_compilation_attempts;
CREATE POLICY kfsdb_every_row ON document_compilation_attempts USING (true) WITH CHECK (true);
DROP POLICY IF EXISTS kfsdb_every_row ON document_compilation_outbox;
CREATE POLICY kfsdb_every_row ON document_compilation_outbox USING (true) WITH CHECK (true);

-- Before issue 39 the console roles were confined by a session setting
-- (kfsdb.tenant), which any session could change. Gone.
DROP POLICY IF EXISTS kfsdb_console_tenant ON document_compilation_attempts;
DROP POLICY IF EXISTS kfsdb_console_tenant ON document_compilation_outbox;
DROP FUNCTION IF EXISTS kfsdb_console_tenant_visible(text);

-- The confined groups' members see, and may write, only the rows of the
-- tenant their own role is mapped to; a role with no mapping (the group
-- itself, after SET ROLE) sees nothing. The lookup is a sub-select, run
-- once per statement (an InitPlan), and its comparison an index condition
-- on tenant_id that the planner merges with the query's own "tenant_id =
-- T": the attempts list page still walks tenant_completed_idx to its
-- LIMIT. WITH CHECK stops an UPDATE from moving a row to another tenant.
DROP POLICY IF EXISTS kfsdb_console_confined ON document_compilation_attempts;
CREATE POLICY kfsdb_console_confined ON document_compilation_attempts AS RESTRICTIVE
  TO kfsdb_console_confined, kfsdb_console_confined_operator
  USING (tenant_id = (SELECT c.tenant_id FROM kfsdb_console_confinement c WHERE c.role_name = current_user))
  WITH CHECK (tenant_id = (SELECT c.tenant_id FROM kfsdb_console_confinement c WHERE c.role_name = current_user));
-- The outbox has no tenant column: a row is its attempt's tenant's (the
-- sub-select is itself under the attempts' policy).
DROP POLICY IF EXISTS kfsdb_console_confined ON document_compilation_outbox;
CREATE POLICY kfsdb_console_confined ON document_compilation_outbox AS RESTRICTIVE
  TO kfsdb_console_confined, kfsdb_console_confined_operator
  USING (EXISTS (SELECT FROM document_compilation_attempts a WHERE a.id = attempt_id))
  WITH CHECK (EXISTS (SELECT FROM document_compilation_attempts a WHERE a.id = attempt_id));

-- kfsdb_confine_console(role, tenant, can_act): see the header. Runs with
-- its caller's rights (CREATEROLE, the groups' ADMIN option and the
-- table's owner are needed), so PUBLIC may not call it.
CREATE OR REPLACE PROCEDURE kfsdb_confine_console(console_role name, tenant text, can_act boolean DEFAULT false)
  LANGUAGE plpgsql
  AS $proc$
DECLARE
  grp name := CASE WHEN can_act THEN 'kfsdb_console_confined_operator' ELSE 'kfsdb_console_confined' END;
  other_grp name := CASE WHEN can_act THEN 'kfsdb_console_confined' ELSE 'kfsdb_console_confined_operator' END;
  r pg_catalog.pg_roles%ROWTYPE;
  mapped text;
  culprit text;
BEGIN
  IF console_role IS NULL OR console_role = '' THEN
    RAISE EXCEPTION 'kfsdb_confine_console: a role name is required' USING ERRCODE = 'invalid_parameter_value';
  END IF;
  IF tenant IS NULL OR tenant = '' OR char_length(tenant) > 255 THEN
    RAISE EXCEPTION 'kfsdb_confine_console: tenant must be 1 to 255 characters, got %', coalesce(quote_literal(tenant), 'NULL')
      USING ERRCODE = 'invalid_parameter_value';
  END IF;
  IF console_role IN ('kfsdb_console_confined', 'kfsdb_console_confined_operator', 'kfsdb_console_ro', 'kfsdb_operator', 'kfsdb_app') THEN
    RAISE EXCEPTION 'kfsdb_confine_console: % is one of kfsdb''s shared roles; confine a login role of its own', console_role
      USING ERRCODE = 'invalid_parameter_value';
  END IF;

  SELECT * INTO r FROM pg_catalog.pg_roles WHERE rolname = console_role;
  IF NOT FOUND THEN
    EXECUTE format('CREATE ROLE %I LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE NOREPLICATION NOBYPASSRLS', console_role);
    SELECT * INTO r FROM pg_catalog.pg_roles WHERE rolname = console_role;
  END IF;

  IF r.rolsuper THEN
    RAISE EXCEPTION 'kfsdb_confine_console: % is a superuser, which row-level security does not confine', console_role
      USING ERRCODE = 'insufficient_privilege';
  END IF;
  IF r.rolbypassrls THEN
    RAISE EXCEPTION 'kfsdb_confine_console: % has BYPASSRLS, which row-level security does not confine', console_role
      USING ERRCODE = 'insufficient_privilege';
  END IF;
  SELECT string_agg(c.relname, ', ') INTO culprit FROM pg_catalog.pg_class c
   WHERE c.oid IN ('document_compilation_attempts'::regclass, 'document_compilation_outbox'::regclass)
     AND pg_catalog.pg_has_role(r.oid, c.relowner, 'MEMBER');
  IF culprit IS NOT NULL THEN
    RAISE EXCEPTION 'kfsdb_confine_console: % owns % (or is a member of the owner), which row-level security does not confine', console_role, culprit
      USING ERRCODE = 'insufficient_privilege';
  END IF;
  -- Any other role it can become, or inherits, and that may touch the
  -- tables would be a way out (SET ROLE).
  SELECT string_agg(b.rolname, ', ' ORDER BY b.rolname) INTO culprit FROM pg_catalog.pg_roles b
   WHERE b.oid <> r.oid AND b.rolname NOT IN ('kfsdb_console_confined', 'kfsdb_console_confined_operator')
     AND pg_catalog.pg_has_role(r.oid, b.oid, 'MEMBER')
     AND (b.rolsuper OR b.rolbypassrls
          OR pg_catalog.has_table_privilege(b.oid, 'document_compilation_attempts', 'SELECT, INSERT, UPDATE, DELETE, TRUNCATE')
          OR pg_catalog.has_table_privilege(b.oid, 'document_compilation_outbox', 'SELECT, INSERT, UPDATE, DELETE, TRUNCATE'));
  IF culprit IS NOT NULL THEN
    RAISE EXCEPTION 'kfsdb_confine_console: % is a member of %, which can read the tables unconfined; revoke that first', console_role, culprit
      USING ERRCODE = 'insufficient_privilege';
  END IF;
  IF pg_catalog.pg_has_role(r.oid, other_grp, 'MEMBER') THEN
    RAISE EXCEPTION 'kfsdb_confine_console: % is already a member of %; revoke that first to change what it may do', console_role, other_grp
      USING ERRCODE = 'invalid_parameter_value';
  END IF;
  SELECT c.tenant_id INTO mapped FROM kfsdb_console_confinement c WHERE c.role_name = console_role;
  IF mapped IS NOT NULL AND mapped <> tenant THEN
    RAISE EXCEPTION 'kfsdb_confine_console: % is already confined to tenant %; a role serves one tenant', console_role, quote_literal(mapped)
      USING ERRCODE = 'invalid_parameter_value';
  END IF;

  IF mapped IS NULL THEN
    INSERT INTO kfsdb_console_confinement (role_name, tenant_id) VALUES (console_role, tenant);
  END IF;
  IF NOT pg_catalog.pg_has_role(r.oid, grp, 'MEMBER') THEN
    EXECUTE format('GRANT %I TO %I', grp, console_role);
  END IF;
END
$proc$;
REVOKE ALL ON PROCEDURE kfsdb_confine_console(name, text, boolean) FROM PUBLIC;
