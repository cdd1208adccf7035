package relay

import (
	"context"
	"time"

	"github.com/knowledgefs/kfsdb/internal/backoff"
	"github.com/knowledgefs/kfsdb/internal/pglisten"
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
	var w pglisten.Idle
	var failures int32 // batches failed in a row
	for {
		n, err := r.RunOnce(ctx)
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if err != nil {
			failures++
			r.log.ErrorContext(ctx, "relay batch failed", "err", err)
		} else {
			failures = 0
		}
		var wait time.Duration
		switch {
		case n == int(r.cfg.BatchSize) && err == nil:
			w.Reset()
			continue // a full batch: more rows are likely due
		case n > 0:
			w.Reset()
			wait = r.cfg.FollowUpInterval
		case err != nil:
			w.Reset()
			wait = backoff.Retry(failures, r.cfg.PollInterval)
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

// idle decides how long to sleep after a claim that found nothing; again
// asks for one more claim first (after a new registration).
func (r *Relay) idle(ctx context.Context, w *pglisten.Idle) (wait time.Duration, again bool) {
	return w.Next(ctx, &pglisten.IdleParams{Repo: r.cfg.Repo, Pool: r.pool, Log: r.log, ID: r.cfg.ID,
		PollInterval: r.cfg.PollInterval, FollowUp: r.cfg.FollowUpInterval, CallTimeout: r.cfg.WriteTimeout,
		Listening: !r.cfg.PollOnly && r.listening.Load()})
}

// awake ends the relay's idle registration as it stops.
func (r *Relay) awake(ctx context.Context) {
	pglisten.Awake(ctx, r.cfg.Repo, r.pool, r.log, r.cfg.ID, r.cfg.WriteTimeout)
}

// sleep waits until deadline, or until a notification says a row is due.
func (r *Relay) sleep(ctx context.Context, timer *time.Timer, deadline time.Time) error {
	_, err := r.wake.Sleep(ctx, timer, deadline)
	return err
}

// listen holds one pooled connection in LISTEN and notes notifications in
// wake, reconnecting with backoff until ctx ends.
func (r *Relay) listen(ctx context.Context) {
	l := &pglisten.Listener{Pool: r.pool, Wake: r.wake, Log: r.log, Name: "relay", ID: r.cfg.ID, CallTimeout: r.cfg.WriteTimeout,
		Listening: func(on bool) {
			r.listening.Store(on)
			if on {
				r.testSignals.Listening.Signal(struct{}{})
			}
		},
		Lost: r.awake,
	}
	l.Listen(ctx)
}
