package console

import (
	"log/slog"
	"net/http"
	"time"
)

// AuditMessage is the message of every audit line: filter the console's
// log on msg=audit.
const AuditMessage = "audit"

// auditEntry is one action's audit line, applied or refused.
type auditEntry struct {
	Tenant, Attempt, Action string
	From, To                string
	Result, Reason          string
}

// audit writes one structured line to Config.AuditLogger: when, who (the
// session, never its cookie), from where (the peer and what proxies
// forwarded), on what, which change, and the result and its reason.
func (s *Server) audit(r *http.Request, e auditEntry) {
	who := "anonymous"
	if p, ok := principalOf(r); ok {
		who = p.String()
	}
	s.auditLog.LogAttrs(r.Context(), slog.LevelInfo, AuditMessage,
		slog.Time("at", time.Now().UTC()),
		slog.String("session", who),
		slog.String("remote", r.RemoteAddr),
		slog.String("forwarded", forwardedFor(r)),
		slog.String("tenant", e.Tenant),
		slog.String("attempt", e.Attempt),
		slog.String("action", e.Action),
		slog.String("from", e.From),
		slog.String("to", e.To),
		slog.String("result", e.Result),
		slog.String("reason", e.Reason))
}
