package ops

import (
	"context"
	"log/slog"
	"time"
)

// AuditMessage is the message of every audit line, the console's and the
// CLI's: filter a log on msg=audit.
const AuditMessage = "audit"

// AuditLine is one operator action's audit record, applied or refused:
// when, who, from where, on what, which change, and how it ended.
type AuditLine struct {
	// Session names who acted: "session:<12 hex>" (a console login, by a
	// hash prefix, never its cookie), "bearer" (the console's token) or
	// "cli:<user>" (an operator command).
	Session string
	// Remote is the peer address (the console's TCP peer, the CLI's host)
	// and Forwarded what proxies said about the client.
	Remote, Forwarded string
	Tenant, Attempt   string
	Action            string
	// From and To are the states before and after ("" when not read).
	From, To string
	// Result is applied or refused (ops' outcomes), Reason why.
	Result, Reason string
}

// Log writes l as one structured line at INFO on log.
func (l AuditLine) Log(ctx context.Context, log *slog.Logger) {
	log.LogAttrs(ctx, slog.LevelInfo, AuditMessage,
		slog.Time("at", time.Now().UTC()),
		slog.String("session", l.Session),
		slog.String("remote", l.Remote),
		slog.String("forwarded", l.Forwarded),
		slog.String("tenant", l.Tenant),
		slog.String("attempt", l.Attempt),
		slog.String("action", l.Action),
		slog.String("from", l.From),
		slog.String("to", l.To),
		slog.String("result", l.Result),
		slog.String("reason", l.Reason))
}
