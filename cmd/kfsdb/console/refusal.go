package console

import (
	"net/http"
	"strings"
)

// refuse counts a wrong token or one-time code from r's client (the
// address clientAddr believes) and writes its one line, the audit line,
// when the throttle lets one through; it returns the status to answer:
// 429 when the client was locked, else 401. Only a wrong credential
// comes here: a right one is accepted first, whatever the client's
// count (see httpguard.Throttle for why).
func (s *Server) refuse(r *http.Request, reason string) int {
	refusal := s.throttle.Fail(s.clientAddr(r))
	refusal.LogSuppressed(s.auditLog, "console")
	if refusal.Log {
		if refusal.Throttled {
			reason += "; too many failed logins from this address"
		}
		s.audit(r, auditEntry{Action: "login", Result: "refused", Reason: reason})
	}
	return refusal.Status()
}

// bearerToken says whether r carries a bearer token, right or wrong: only
// that is a try of the console's token. Another Authorization scheme (an
// auth proxy's Basic) is the proxy's business: ignored, the session
// cookie decides.
func bearerToken(r *http.Request) bool {
	return strings.HasPrefix(r.Header.Get("Authorization"), "Bearer ")
}
