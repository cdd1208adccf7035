package pglisten

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/knowledgefs/kfsdb/internal/backoff"
)

// Listener is what Listen reports to.
type Listener struct {
	Pool *pgxpool.Pool
	Wake *Wakeup
	Log  *slog.Logger
	// ID is the owner's listener id, under which it registers idle:
	// notifications that name another listener are not for it.
	ID string
	// Name says who listens, in log lines ("relay", "source").
	Name string
	// Listening is told true once LISTEN is in place, false when the
	// connection is lost.
	Listening func(bool)
	// Lost runs after the connection was lost, before the retry: nobody
	// hears notifications now (the owner ends its idle registration).
	Lost func(ctx context.Context)
	// CallTimeout bounds taking the connection, LISTEN and each check of a
	// silent connection (none when zero).
	CallTimeout time.Duration
}

// SilenceCheck is how long the LISTEN connection may stay silent before
// the listener pings it: a connection whose server vanished without a
// word (a primary lost in a failover) would otherwise wait for
// notifications that never come, and the owner would only poll, until the
// kernel gave up on it (~15 minutes, or never on an idle socket).
const SilenceCheck = 30 * time.Second

// bounded is ctx bounded by d, or ctx itself when d is zero.
func bounded(ctx context.Context, d time.Duration) (context.Context, context.CancelFunc) {
	if d <= 0 {
		return ctx, func() {}
	}
	return context.WithTimeout(ctx, d)
}

// Listen holds one pooled connection in LISTEN and notes notifications'
// due times in Wake, reconnecting with backoff until ctx ends.
func (l *Listener) Listen(ctx context.Context) {
	for attempt := int32(1); ctx.Err() == nil; attempt++ {
		err := l.listenOnce(ctx)
		l.Listening(false)
		if ctx.Err() != nil {
			return
		}
		l.Lost(ctx)
		delay := backoff.Jitter(backoff.Exponential(100*time.Millisecond, backoff.RetryCeiling, attempt), 0.2)
		l.Log.WarnContext(ctx, l.Name+" listener lost; polling until it is back", "err", err, "retry_in", delay)
		select {
		case <-ctx.Done():
			return
		case <-time.After(delay):
		}
	}
}

func (l *Listener) listenOnce(ctx context.Context) error {
	cctx, cancel := bounded(ctx, l.CallTimeout)
	defer cancel()
	conn, err := l.Pool.Acquire(cctx)
	if err != nil {
		return err
	}
	// A connection that was LISTENing goes back to nobody: destroy it
	// (Close on a dead one waits for nothing: it sends Terminate and
	// closes the socket).
	defer func() { _ = conn.Hijack().Close(context.WithoutCancel(ctx)) }()
	if _, err := conn.Exec(cctx, "LISTEN "+Channel); err != nil {
		return err
	}
	l.Listening(true)
	// Notifications sent while nobody listened are gone: look now.
	l.Wake.Note(time.Now())
	for {
		wctx, cancel := context.WithTimeout(ctx, SilenceCheck)
		n, err := conn.Conn().WaitForNotification(wctx)
		cancel()
		if err != nil && ctx.Err() == nil && wctx.Err() != nil {
			// Silent for SilenceCheck: is anybody there?
			pctx, cancel := bounded(ctx, l.CallTimeout)
			err = conn.Ping(pctx)
			cancel()
			if err == nil {
				continue
			}
			return fmt.Errorf("a silent LISTEN connection did not answer a ping: %w", err)
		}
		if err != nil {
			return err
		}
		due, target, perr := ParsePayload(n.Payload)
		switch {
		case target != "" && target == l.ID:
			l.Wake.NoteTaken()
		case target != "":
			// Another listener's wake-up.
		case perr != nil:
			l.Wake.Note(time.Now())
		default:
			l.Wake.Note(due)
		}
	}
}
