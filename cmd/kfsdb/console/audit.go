package console

import (
	"cmp"
	"net/http"

	"github.com/knowledgefs/kfsdb/cmd/kfsdb/ops"
)

// AuditMessage is the message of every audit line: filter the console's
// log on msg=audit.
const AuditMessage = ops.AuditMessage

// auditEntry is one action's audit line, applied or refused.
type auditEntry struct {
	Tenant, Attempt, Action string
	From, To                string
	Result, Reason          string
	// OperatorReason is the reason the operator typed in the
	// confirmation form.
	OperatorReason string
	// Detail says which bulk action (and batch) a line belongs to, and a
	// bulk action's filter and counts.
	Detail string
}

// audit writes one structured line (ops.AuditLine) to
// Config.AuditLogger: when, who (the session, never its cookie), from
// where (the peer, and what the forwarding headers claim: any client can
// send them, so they are logged as forwarded_claim), on which tenant (a
// confined console's own when the entry names none: refusals before the
// tenant is read included), which change, why the operator asked, and
// the result and its reason.
func (s *Server) audit(r *http.Request, e auditEntry) {
	who := "anonymous"
	if p, ok := principalOf(r); ok {
		who = p.String()
	}
	ops.AuditLine{Session: who, Remote: r.RemoteAddr, ForwardedClaim: forwardedFor(r), Tenant: cmp.Or(e.Tenant, s.cfg.TenantID),
		Attempt: e.Attempt, Action: e.Action, From: e.From, To: e.To, Result: e.Result, Reason: e.Reason,
		OperatorReason: e.OperatorReason, Detail: e.Detail}.Log(r.Context(), s.auditLog)
}
