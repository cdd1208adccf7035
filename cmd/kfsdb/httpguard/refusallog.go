package httpguard

import (
	"log/slog"
	"time"
)

// At most RefusalLogBurst refusals are logged per RefusalLogWindow in a
// process (each Throttle): a guessing run writes a few lines a second,
// not one per guess, and the next line after a quiet window says how
// many went unlogged.
const (
	RefusalLogBurst  = 10
	RefusalLogWindow = time.Second
)

// RefusalsNotLogged is the message of the line that counts the refusals
// a window did not log.
const RefusalsNotLogged = "refusals not logged"

// lineLimiter lets burst lines through per window; the caller holds the
// Throttle's lock.
type lineLimiter struct {
	burst      int
	window     time.Duration
	start      time.Time
	written    int
	suppressed int
}

// allow says whether a line may be written now, and how many were
// suppressed in the window that just ended (reported once, by the first
// line of the next window).
func (l *lineLimiter) allow(now time.Time) (write bool, suppressed int) {
	if now.Sub(l.start) >= l.window || now.Before(l.start) {
		suppressed = l.suppressed
		l.start, l.written, l.suppressed = now, 0, 0
	}
	if l.written < l.burst {
		l.written++
		return true, suppressed
	}
	l.suppressed++
	return false, suppressed
}

// LogSuppressed writes the line that counts refusals not logged, when
// there were any: what names the server ("console", "metrics").
func (r Refusal) LogSuppressed(log *slog.Logger, what string) {
	if r.Suppressed > 0 {
		log.Warn(RefusalsNotLogged, "server", what, "count", r.Suppressed)
	}
}
