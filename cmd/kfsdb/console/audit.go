package console

import (
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
}

// audit writes one structured line (ops.AuditLine) to
// Config.AuditLogger: when, who (the session, never its cookie), from
// where (the peer and what proxies forwarded), on what, which change, and
// the result and its reason.
func (s *Server) audit(r *http.Request, e auditEntry) {
	who := "anonymous"
	if p, ok := principalOf(r); ok {
		who = p.String()
	}
	ops.AuditLine{Session: who, Remote: r.RemoteAddr, Forwarded: forwardedFor(r), Tenant: e.Tenant, Attempt: e.Attempt,
		Action: e.Action, From: e.From, To: e.To, Result: e.Result, Reason: e.Reason}.Log(r.Context(), s.auditLog)
}
