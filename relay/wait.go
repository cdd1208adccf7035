package relay

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/knowledgefs/kfsdb/internal/backoff"
	"github.com/knowledgefs/kfsdb/repo"
)

// Run claims and publishes until ctx ends, then returns ctx.Err(). It
// claims again at once after a full batch and after FollowUpInterval after
// a batch that found rows. When a claim finds nothing, the relay registers
// itself idle (repo.OutboxListenerIdle) and sleeps until a notification
// says a row is due, until the next row's due time, or PollInterval at the
// latest; a committed Start wakes it whatever its transaction did before.
// A due row it could not claim (another transaction held its lock) is
// tried again after 1, 2, 4 … ms, then every FollowUpInterval. On shutdown it stops claiming; rows of
// an interrupted batch that were published are still marked, the rest
// stay claimed until their lock deadline and are then reclaimed.
func (r *Relay) Run(ctx context.Context) error {
	if err := r.usable(ctx); err != nil {
		return err
	}
	if !r.cfg.PollOnly {
		listenDone := make(chan struct{})
		lctx, cancel := context.WithCancel(ctx)
		go func() {
			defer close(listenDone)
			r.listen(lctx)
		}()
		defer func() { cancel(); <-listenDone }()
		defer r.awake(ctx)
	}
	timer := time.NewTimer(0)
	defer timer.Stop()
	var w idleWait
	for {
		n, err := r.RunOnce(ctx)
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if err != nil {
			r.log.ErrorContext(ctx, "relay batch failed", "err", err)
		}
		var wait time.Duration
		switch {
		case n == int(r.cfg.BatchSize) && err == nil:
			w.reset()
			continue // a full batch: more rows are likely due
		case n > 0:
			w.reset()
			wait = r.cfg.FollowUpInterval
		case err != nil:
			w.reset()
			wait = r.cfg.PollInterval
		default:
			var again bool
			wait, again = r.idle(ctx, &w)
			if again {
				continue
			}
		}
		if err := r.sleep(ctx, timer, time.Now().Add(wait)); err != nil {
			return err
		}
	}
}

// idleWait is the relay's state between claims that found nothing.
type idleWait struct {
	// recheck is a new registration whose claim-once-more is under way.
	recheck *repo.ListenerIdleResult
	// retry is the wait before trying a due row that was locked again.
	retry time.Duration
}

func (w *idleWait) reset() { *w = idleWait{} }

// idle decides how long to sleep after a claim that found nothing; again
// asks for one more claim first (after a new registration).
func (r *Relay) idle(ctx context.Context, w *idleWait) (wait time.Duration, again bool) {
	res := w.recheck
	w.recheck = nil
	if res == nil {
		if r.cfg.PollOnly || !r.listening.Load() {
			return r.cfg.PollInterval, false
		}
		var err error
		res, err = r.cfg.Repo.OutboxListenerIdle(ctx, r.pool, &repo.ListenerIdleParams{ListenerID: r.cfg.ID, TTL: r.idleTTL()})
		if err != nil {
			if ctx.Err() == nil {
				r.log.WarnContext(ctx, "relay could not register idle; polling", "err", err)
			}
			return r.cfg.PollInterval, false
		}
		if res.Inserted {
			// A commit that checked just before the registration did not
			// notify: the claim after it finds that row.
			w.recheck = res
			return 0, true
		}
	}
	if !res.Registered || res.NextDueIn != nil && *res.NextDueIn <= 0 {
		// A commit was checking at that instant, or a due row's lock was
		// held: look again soon, backing off to the follow-up pace while
		// it lasts (a notification still wakes the relay at once).
		w.retry = min(max(2*w.retry, time.Millisecond), r.cfg.FollowUpInterval)
		return w.retry, false
	}
	w.retry = 0
	if res.NextDueIn != nil {
		return min(*res.NextDueIn, r.cfg.PollInterval), false
	}
	return r.cfg.PollInterval, false
}

// idleTTL outlives the sleep between two refreshes of the registration by
// a wide margin: a registration lost while its relay sleeps costs wake-ups.
func (r *Relay) idleTTL() time.Duration { return 2*r.cfg.PollInterval + 10*time.Second }

// awake ends the relay's idle registration as it stops.
func (r *Relay) awake(ctx context.Context) {
	actx, cancel := context.WithTimeout(context.WithoutCancel(ctx), r.cfg.WriteTimeout)
	defer cancel()
	if err := r.cfg.Repo.OutboxListenerAwake(actx, r.pool, r.cfg.ID); err != nil {
		r.log.WarnContext(ctx, "relay could not end its idle registration; it expires", "err", err)
	}
}

// sleep waits until deadline, or until a notification says a row is due
// (now, or before the deadline: then until that time).
func (r *Relay) sleep(ctx context.Context, timer *time.Timer, deadline time.Time) error {
	for {
		if due, ok := r.wake.take(); ok {
			if !due.After(time.Now()) {
				return nil
			}
			if due.Before(deadline) {
				deadline = due
			}
		}
		timer.Reset(time.Until(deadline))
		select {
		case <-ctx.Done():
			timer.Stop()
			return ctx.Err()
		case <-timer.C:
			return nil
		case <-r.wake.ch:
			timer.Stop()
		}
	}
}

// listen holds one pooled connection in LISTEN and forwards notifications
// to wake, reconnecting with backoff until ctx ends.
func (r *Relay) listen(ctx context.Context) {
	for attempt := int32(1); ctx.Err() == nil; attempt++ {
		err := r.listenOnce(ctx)
		r.listening.Store(false)
		if ctx.Err() != nil {
			return
		}
		// Nobody hears notifications now: commits need not send them.
		r.awake(ctx)
		delay := backoff.Jitter(backoff.Exponential(100*time.Millisecond, 5*time.Second, attempt), 0.2)
		r.log.WarnContext(ctx, "relay listener lost; polling until it is back", "err", err, "retry_in", delay)
		select {
		case <-ctx.Done():
			return
		case <-time.After(delay):
		}
	}
}

func (r *Relay) listenOnce(ctx context.Context) error {
	conn, err := r.pool.Acquire(ctx)
	if err != nil {
		return err
	}
	// A connection that was LISTENing goes back to nobody: destroy it.
	defer func() { _ = conn.Hijack().Close(context.WithoutCancel(ctx)) }()
	if _, err := conn.Exec(ctx, "LISTEN "+NotifyChannel); err != nil {
		return err
	}
	r.listening.Store(true)
	// Notifications sent while nobody listened are gone: claim now.
	r.wake.note(time.Now())
	r.testSignals.Listening.Signal(struct{}{})
	for {
		n, err := conn.Conn().WaitForNotification(ctx)
		if err != nil {
			return err
		}
		due := time.Now()
		if t, perr := parseDue(n.Payload); perr == nil {
			due = t
		}
		r.wake.note(due)
	}
}

// wakeup keeps the earliest due time announced since the relay last
// looked, so that a due-now notification is never lost behind a later one.
type wakeup struct {
	mu  sync.Mutex
	due time.Time // zero: none pending
	ch  chan struct{}
}

func newWakeup() *wakeup { return &wakeup{ch: make(chan struct{}, 1)} }

func (w *wakeup) note(due time.Time) {
	w.mu.Lock()
	if w.due.IsZero() || due.Before(w.due) {
		w.due = due
	}
	w.mu.Unlock()
	select {
	case w.ch <- struct{}{}:
	default: // a poke is pending; take reads the earliest time
	}
}

func (w *wakeup) take() (time.Time, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	due := w.due
	w.due = time.Time{}
	return due, !due.IsZero()
}

// parseDue reads a notification payload: a timestamptz in PostgreSQL's
// text form.
func parseDue(s string) (time.Time, error) {
	for _, layout := range []string{"2006-01-02 15:04:05.999999-07", "2006-01-02 15:04:05.999999-07:00", "2006-01-02 15:04:05-07"} {
		if t, err := time.Parse(layout, s); err == nil {
			return t, nil
		}
	}
	return time.Time{}, fmt.Errorf("relay: unparsable due time %q", s)
}
