-- kfsdb application role: least privilege.
--
-- Not a migration. Run it once per database, as the owner of kfsdb's
-- tables (the role that ran the migrations), after `migrate up`:
--
--   psql "$OWNER_DATABASE_URL" -v ON_ERROR_STOP=1 -f db/roles/app_role.sql
--   psql "$OWNER_DATABASE_URL" -c "\password kfsdb_app"
--
-- Creating the role needs CREATEROLE (or a superuser); the grants need the
-- table owner. The application then connects as kfsdb_app. It can read and
-- write attempts and outbox rows, read the four tables kfsdb only reads,
-- and nothing else: it owns nothing, so it cannot ALTER, DROP, TRUNCATE or
-- index anything, and cannot create objects in schema public or new
-- schemas. tests/privilege runs every transition, the relay and a worker as
-- this role and proves the DDL is refused. Running the file again is
-- harmless.

DO $$
BEGIN
  IF NOT EXISTS (SELECT FROM pg_catalog.pg_roles WHERE rolname = 'kfsdb_app') THEN
    CREATE ROLE kfsdb_app LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE NOREPLICATION NOBYPASSRLS;
  END IF;
END
$$;

-- PostgreSQL 15 and later already deny CREATE on schema public to PUBLIC;
-- older servers grant it, so say it explicitly.
REVOKE CREATE ON SCHEMA public FROM PUBLIC;
GRANT USAGE ON SCHEMA public TO kfsdb_app;

-- The module's own tables: every transition, the relay, the worker, purge.
GRANT SELECT, INSERT, UPDATE, DELETE
  ON TABLE document_compilation_attempts, document_compilation_outbox
  TO kfsdb_app;

-- The application's relays register here while idle (migration 0007);
-- without this grant they cannot and poll instead. Commits never need it:
-- the wake-up trigger reads the table with its owner's rights.
GRANT SELECT, INSERT, UPDATE, DELETE
  ON TABLE document_compilation_outbox_idle_listeners
  TO kfsdb_app;

-- Per-tenant caps of direct delivery (migration 0008): every fetch reads
-- and stamps them; SetTenantLimit writes them.
GRANT SELECT, INSERT, UPDATE, DELETE
  ON TABLE document_compilation_tenant_limits
  TO kfsdb_app;

-- Start trace contexts (migration 0009): every Start's statement names the
-- table (PostgreSQL checks the grant even when an untraced Start writes no
-- row), and traced relays and sources read it. Rows go with their attempt
-- (ON DELETE CASCADE runs with the table owner's rights): no DELETE.
GRANT SELECT, INSERT
  ON TABLE document_compilation_trace_contexts
  TO kfsdb_app;

-- Tables kfsdb reads but never writes (Start checks the space, asset
-- version and publication head; Advance checks the candidate publication).
-- The platform's own role writes them.
GRANT SELECT
  ON TABLE knowledge_spaces, document_assets, projection_set_publications, projection_set_publication_heads
  TO kfsdb_app;

-- Optional: temporary tables are not schema changes, but the application
-- never needs one. PUBLIC holds TEMPORARY on every database by default;
-- revoking it affects every role without an explicit grant, so it is left
-- to the deployment:
--   REVOKE TEMPORARY ON DATABASE <dbname> FROM PUBLIC;
