package ops

import (
	"context"
	"log/slog"
	"time"

	"github.com/knowledgefs/kfsdb/cmd/kfsdb/escape"
)

// AuditMessage is the message of every audit line, the console's and the
// CLI's: filter a log on msg=audit.
const AuditMessage = "audit"

// OutcomeFailed is the result of an audited change that started and was
// stopped by an error (a purge or a migration), as opposed to one the
// guards refused before it changed anything; Detail says how far it got.
const OutcomeFailed = "failed"

// AuditLine is one change's audit record, applied, refused or failed:
// when, who, from where, on which tenant and attempt, which change, why
// the operator asked for it, and how it ended.
//
// Every value is escaped (escape.Field) before it is logged, whatever the
// handler: a tenant id, a reason or a forwarded header holding a newline,
// a quote or an escape sequence stays one value of one line and cannot
// forge another field or another line.
type AuditLine struct {
	// Session names who acted: "session:<12 hex>" (a console login, by a
	// hash prefix, never its cookie), "bearer" (the console's token),
	// "anonymous" (a refused request) or "cli:<user>" (an operator
	// command, by the operating system user).
	Session string
	// DBRole is the database role the change ran as (current_user), when
	// it was read; "" otherwise.
	DBRole string
	// Remote is the peer address (the console's TCP peer, the CLI's
	// host).
	Remote string
	// ForwardedClaim is what the request's Forwarded and X-Forwarded-For
	// headers said about the client: a claim, which any client can send
	// and which only a trusted proxy's last hop makes true, logged as
	// forwarded_claim so that nobody reads it as a fact.
	ForwardedClaim string
	// Tenant is the tenant the change concerned, refused ones included
	// (for a confined console, its tenant); "" for one that concerns
	// every tenant (migrate).
	Tenant  string
	Attempt string
	// Action is the change: an action of the table (Actions: cancel,
	// retry, supersede, release) or, for a bulk action's summary line,
	// bulk-NAME; a tenant action of its table (TenantActions:
	// tenant-set-limit, tenant-clear-limit, tenant-pause, tenant-resume);
	// login, logout, purge, migrate-up, migrate-down.
	Action string
	// From and To are the states before and after ("" when not read);
	// for a migration, the schema versions; for a tenant's limits,
	// LimitSummary's words.
	From, To string
	// Result is applied, refused (ops' outcomes) or failed; Reason why
	// it was refused or failed.
	Result, Reason string
	// OperatorReason is why the operator asked for the change (the CLI's
	// --reason, the console's reason field); "" when none was given.
	OperatorReason string
	// Detail says what an applied change did (a purge's count and
	// cut-off, the migrations applied); "" when From and To say it all.
	Detail string
}

// Log writes l as one structured line at INFO on log, every value
// escaped. The fields are, in order: at, session, remote,
// forwarded_claim, tenant, attempt, action, from, to, result, reason,
// operator_reason, db_role, detail.
func (l AuditLine) Log(ctx context.Context, log *slog.Logger) {
	field := func(key, value string) slog.Attr { return slog.String(key, escape.Field(value)) }
	log.LogAttrs(ctx, slog.LevelInfo, AuditMessage,
		slog.Time("at", time.Now().UTC()),
		field("session", l.Session),
		field("remote", l.Remote),
		field("forwarded_claim", l.ForwardedClaim),
		field("tenant", l.Tenant),
		field("attempt", l.Attempt),
		field("action", l.Action),
		field("from", l.From),
		field("to", l.To),
		field("result", l.Result),
		field("reason", l.Reason),
		field("operator_reason", l.OperatorReason),
		field("db_role", l.DBRole),
		field("detail", l.Detail))
}
