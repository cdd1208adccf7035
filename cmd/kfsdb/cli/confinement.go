package cli

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// ConfinementCause says why a console's database role does not match how
// it was started: a --tenant console whose role could read another
// tenant's rows, or a console without --tenant on a confined role.
type ConfinementCause string

// The causes, in the order CheckConfinement tests them.
const (
	// CauseNotInstalled: db/roles/console_roles.sql's confinement (the
	// table, the policies) is missing from the database.
	CauseNotInstalled ConfinementCause = "confinement not installed"
	// CauseSuperuser: superusers bypass row-level security.
	CauseSuperuser ConfinementCause = "superuser"
	// CauseBypassRLS: the role has BYPASSRLS.
	CauseBypassRLS ConfinementCause = "BYPASSRLS"
	// CauseOwner: the role owns the tables, or is a member of their owner;
	// owners bypass row-level security.
	CauseOwner ConfinementCause = "table owner"
	// CauseRLSDisabled: row-level security is off on a table.
	CauseRLSDisabled ConfinementCause = "row-level security disabled"
	// CauseUnconfinedRole: the role is in no confined group, so the
	// confinement policy does not apply to it (kfsdb_console_ro,
	// kfsdb_operator, the application role).
	CauseUnconfinedRole ConfinementCause = "unconfined role"
	// CauseUnmapped: the role is in a confined group but mapped to no
	// tenant (it would see nothing).
	CauseUnmapped ConfinementCause = "no tenant mapped"
	// CauseOtherTenant: the role is confined to another tenant.
	CauseOtherTenant ConfinementCause = "confined to another tenant"
	// CauseEscapeRole: the role can become (SET ROLE) or inherits a role
	// that reads the tables unconfined.
	CauseEscapeRole ConfinementCause = "can become an unconfined role"
	// CauseConfined: a console without --tenant on a confined role.
	CauseConfined ConfinementCause = "confined role without --tenant"
)

// ConfinementError is CheckConfinement's refusal: the console does not
// start.
type ConfinementError struct {
	// Role is the connection's current_user.
	Role string
	// Tenant is the console's --tenant ("" for an unconfined console).
	Tenant string
	// Cause is why.
	Cause ConfinementCause
	// Detail names what was found: the tables, the tenant, the roles.
	Detail string
}

func (e *ConfinementError) Error() string {
	if e.Tenant == "" {
		return fmt.Sprintf("console without --tenant refused (%s): role %q: %s", e.Cause, e.Role, e.Detail)
	}
	return fmt.Sprintf("console --tenant %q refused (%s): role %q: %s", e.Tenant, e.Cause, e.Role, e.Detail)
}

// confinementQuery reads, in one round trip, everything CheckConfinement
// judges about current_user. escapes lists the roles other than itself
// and the confined groups that it is a member of (it can SET ROLE to
// them, or inherits them) and that bypass row-level security or hold any
// privilege on either table. mapped is read from kfsdb_console_confinement,
// which every role may read its own row of; a database without the table
// fails with undefined_table.
const confinementQuery = `
WITH me AS (SELECT r.oid, r.rolname, r.rolsuper, r.rolbypassrls FROM pg_catalog.pg_roles r WHERE r.rolname = current_user),
tables AS (
  SELECT c.oid, c.relname, c.relowner, c.relrowsecurity FROM pg_catalog.pg_class c
   WHERE c.oid IN (to_regclass('document_compilation_attempts'), to_regclass('document_compilation_outbox'))),
grp AS (SELECT r.oid FROM pg_catalog.pg_roles r WHERE r.rolname IN ('kfsdb_console_confined', 'kfsdb_console_confined_operator'))
SELECT me.rolname::text, me.rolsuper, me.rolbypassrls,
  coalesce((SELECT string_agg(t.relname, ', ' ORDER BY t.relname) FROM tables t WHERE pg_catalog.pg_has_role(me.oid, t.relowner, 'MEMBER')), ''),
  (SELECT count(*) FROM tables t WHERE t.relrowsecurity),
  (SELECT count(*) FROM pg_catalog.pg_policy p JOIN tables t ON t.oid = p.polrelid
    WHERE p.polname = 'kfsdb_console_confined' AND NOT p.polpermissive),
  NOT me.rolsuper AND EXISTS (SELECT FROM grp WHERE pg_catalog.pg_has_role(me.oid, grp.oid, 'USAGE')),
  coalesce((SELECT string_agg(b.rolname, ', ' ORDER BY b.rolname) FROM pg_catalog.pg_roles b
    WHERE b.oid <> me.oid AND b.oid NOT IN (SELECT oid FROM grp)
      AND pg_catalog.pg_has_role(me.oid, b.oid, 'MEMBER')
      AND (b.rolsuper OR b.rolbypassrls OR EXISTS (SELECT FROM tables t
            WHERE pg_catalog.has_table_privilege(b.oid, t.oid, 'SELECT, INSERT, UPDATE, DELETE, TRUNCATE')))), ''),
  coalesce((SELECT c.tenant_id FROM kfsdb_console_confinement c WHERE c.role_name = current_user), '')
FROM me`

// confinementFacts is confinementQuery's row.
type confinementFacts struct {
	role, owns, escapes, mapped     string
	super, bypassRLS, inConfinedGrp bool
	tablesWithRLS, confinedPolicies int
}

// CheckConfinement refuses a console whose database role does not match
// its tenant: with tenant set, a role that could read or change any
// other tenant's rows (a superuser, BYPASSRLS, the tables' owner, a role
// outside the confined groups, one mapped to another tenant or none, one
// that can become an unconfined role, or a database whose row-level
// security is off); without, a confined role. Its error is a
// *ConfinementError naming the cause, or the query's own.
func CheckConfinement(ctx context.Context, conn *pgx.Conn, tenant string) error {
	var f confinementFacts
	err := conn.QueryRow(ctx, confinementQuery).Scan(&f.role, &f.super, &f.bypassRLS, &f.owns, &f.tablesWithRLS,
		&f.confinedPolicies, &f.inConfinedGrp, &f.escapes, &f.mapped)
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == "42P01" { // undefined_table
		if tenant == "" {
			return nil // no confinement in this database: nobody is confined
		}
		return &ConfinementError{Role: conn.Config().User, Tenant: tenant, Cause: CauseNotInstalled,
			Detail: "run db/roles/console_roles.sql as the tables' owner, then CALL kfsdb_confine_console(role, tenant, can_act)"}
	}
	if err != nil {
		return fmt.Errorf("check the console's role: %w", err)
	}
	refuse := func(cause ConfinementCause, format string, args ...any) error {
		return &ConfinementError{Role: f.role, Tenant: tenant, Cause: cause, Detail: fmt.Sprintf(format, args...)}
	}
	if tenant == "" {
		switch {
		case f.mapped != "":
			return refuse(CauseConfined, "confined to %q: start with --tenant %s, or connect as an unconfined role (kfsdb_console_ro, kfsdb_operator)", f.mapped, f.mapped)
		case f.inConfinedGrp:
			return refuse(CauseConfined, "a member of a confined group, mapped to no tenant: it sees nothing; connect as an unconfined role (kfsdb_console_ro, kfsdb_operator)")
		}
		return nil
	}
	switch {
	case f.super:
		return refuse(CauseSuperuser, "superusers bypass row-level security")
	case f.bypassRLS:
		return refuse(CauseBypassRLS, "the role bypasses row-level security")
	case f.owns != "":
		return refuse(CauseOwner, "owns %s (or is a member of its owner), which bypasses row-level security", f.owns)
	case f.tablesWithRLS < 2:
		return refuse(CauseRLSDisabled, "row-level security is not enabled on both document_compilation_attempts and document_compilation_outbox: run db/roles/console_roles.sql")
	case f.confinedPolicies < 2:
		return refuse(CauseNotInstalled, "the kfsdb_console_confined policies are missing: run db/roles/console_roles.sql")
	case !f.inConfinedGrp:
		return refuse(CauseUnconfinedRole, "it is in neither kfsdb_console_confined nor kfsdb_console_confined_operator, so it reads every tenant: CALL kfsdb_confine_console('<role>', %s, false) makes a confined role", quoteLiteral(tenant))
	case f.mapped == "":
		return refuse(CauseUnmapped, "no tenant is mapped to it in kfsdb_console_confinement: CALL kfsdb_confine_console(%s, %s, ...)", quoteLiteral(f.role), quoteLiteral(tenant))
	case f.mapped != tenant:
		return refuse(CauseOtherTenant, "it is confined to %q", f.mapped)
	case f.escapes != "":
		return refuse(CauseEscapeRole, "it can SET ROLE to (or inherits) %s, which reads the tables unconfined", f.escapes)
	}
	return nil
}

// quoteLiteral is s as an SQL string literal, for the hints above.
func quoteLiteral(s string) string {
	return "'" + strings.ReplaceAll(s, "'", "''") + "'"
}
