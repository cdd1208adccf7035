package pglisten

import (
	"context"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/knowledgefs/kfsdb/repo"
)

// Idle is a listener's state between looks (claims, fetches) that found
// nothing: the handshake of migration 0007 (register idle, look once
// more, sleep on LISTEN) and the backoff for a due row whose lock another
// transaction holds.
type Idle struct {
	// recheck is a new registration whose look-once-more is under way.
	recheck *repo.OutboxListenerIdleResult
	// retry is the wait before looking for a locked due row again.
	retry time.Duration
	// lookFirst: the wait Next returned is a retry after which the owner
	// reads its registration again before it fetches (IdleParams.
	// LookBeforeRetry); skipped: it did (SkipFetch), so the next reading
	// follows that wait, not a fetch.
	lookFirst, skipped bool
	// polled: the owner's last sleep was a whole PollInterval that
	// nothing cut short (Polled). retried: the fetch Next last asked for
	// is a retry's, for a row still due past the follow-up wait.
	polled, retried bool
	// onceMore: the fetch Next last asked for is a new registration's
	// look once more (OnceMore).
	onceMore bool
	// refreshed is when the owner's registration was last confirmed, and
	// nextDue when that confirmation said the next row comes due (zero:
	// none); both zero once a look ended the registration.
	refreshed, nextDue time.Time
}

// Reset forgets the idle state: the last look found rows and ended the
// owner's registration.
func (w *Idle) Reset() { *w = Idle{} }

// Found: the last look found rows but left the owner's registration in
// place (a direct fetch that did not fill its batch). The backoff ends;
// what is known of the registration is kept.
func (w *Idle) Found() {
	w.recheck = nil
	w.retry = 0
	w.lookFirst, w.skipped, w.polled, w.retried = false, false, false, false
}

// Polled: the owner slept a whole PollInterval that nothing cut short,
// and fetches now; the reading of the registration after that fetch is
// a poll's.
func (w *Idle) Polled() { w.polled = true }

// OnceMore reports whether the fetch Next last asked for (again) is a new
// registration's look once more, not a retry's.
func (w *Idle) OnceMore() bool { return w.onceMore }

// SkipFetch is asked as a sleep ends: true when the sleep was a retry
// wait that ran out (woke is WokeTimer) and the owner is to call Next,
// which reads the registration again, instead of fetching. A sleep a
// notification ended is followed by a fetch.
func (w *Idle) SkipFetch(woke Woke) bool {
	w.skipped = woke == WokeTimer && w.lookFirst
	w.lookFirst = false
	return w.skipped
}

// IdleParams is what Idle.Next needs of its owner.
type IdleParams struct {
	Repo *repo.Repo
	Pool *pgxpool.Pool
	Log  *slog.Logger
	// ID is the owner's listener id (a relay's or worker's id).
	ID string
	// PollInterval is the longest sleep; FollowUp the longest retry wait
	// for a locked due row.
	PollInterval, FollowUp time.Duration
	// Listening: LISTEN is in place (false in poll-only mode).
	Listening bool
	// CallTimeout bounds the registration's statement (none when zero):
	// one on a connection that died without a word ends by it.
	CallTimeout time.Duration
	// LookBeforeRetry: a due row the registration reports is not fetched
	// at once but looked at again, with the registration, after each retry
	// wait (SkipFetch), and fetched once if it is still due past the
	// FollowUp wait: it is most often one a commit just made due and woke
	// another listener for, which takes it meanwhile. If that fetch finds
	// nothing either, the row is one a fetch in flight holds: the owner
	// sleeps until its next poll, instead of fetching at the follow-up pace
	// for as long as rows keep coming due (in a burst of Starts, every
	// process woken once did so until the burst ended). Not after a new
	// registration's look once more, whose due row may be one no commit
	// woke anybody for: that is fetched at once; nor after a refused
	// registration, which keeps fetching at the retry pace (a transaction
	// holding the wake-up lock for long, its check run early by SET
	// CONSTRAINTS, refuses every registration meanwhile, and a fleet with
	// none left in place is woken by nobody). A refresh after an idle poll
	// (Polled) that reports a due row starts no retries at all: the row
	// is a woken listener's, which retries it itself if its lock was held,
	// or a fetch's in flight; the next poll looks again. A direct source
	// sets it: in an idle fleet every refresh that falls while a row waits
	// for its woken listener would otherwise fetch too, and in a burst of
	// Starts, when a row is nearly always due, every idle process would
	// fetch at the follow-up pace.
	LookBeforeRetry bool
	// register replaces repo.OutboxListenerIdle on Pool, in tests.
	register func(context.Context) (*repo.OutboxListenerIdleResult, error)
	// TrustFresh skips the registration's refresh while it is young (a
	// quarter of its TTL) and no row comes due before the poll: a commit
	// notifies the owner anyway, and rows that come due by time alone are
	// seen at the next poll. A direct source sets it; its registration
	// outlives the fetches that do not fill their batch.
	TrustFresh bool
	// Partial: the owner serves only some tenants (pgsource's tenant
	// lists), so a row due now that its look did not take may well be
	// another tenant's, not one whose lock another transaction holds: it
	// is no reason to look again soon. The owner sleeps as if none were
	// due (until a commit notifies it, a later row comes due, or the
	// poll), and sees a locked row of its own at its next look.
	Partial bool
}

// TTL outlives the sleep between two refreshes of a registration by a
// wide margin: a registration lost while its owner sleeps costs wake-ups.
func (p *IdleParams) TTL() time.Duration { return 2*p.PollInterval + 10*time.Second }

// Next decides how long to sleep after a look that found nothing; again
// asks for one more look first (after a new registration, when a row is
// due or the registration could not be read again).
func (w *Idle) Next(ctx context.Context, p *IdleParams) (wait time.Duration, again bool) {
	res := w.recheck
	w.recheck = nil
	looked := w.skipped  // this reading follows a retry wait, not a fetch
	polled := w.polled   // it follows an idle poll's fetch
	retried := w.retried // it follows a retry's fetch that found nothing
	w.skipped, w.lookFirst, w.onceMore, w.polled, w.retried = false, false, false, false, false
	if res == nil {
		if !p.Listening {
			// Not listening (or LISTEN lost, which ends the registration):
			// nothing is known to be registered.
			w.refreshed, w.nextDue = time.Time{}, time.Time{}
			return p.PollInterval, false
		}
		if wait, ok := w.fresh(p); ok {
			return wait, false
		}
		var err error
		if res, err = register(ctx, p); err != nil {
			if ctx.Err() == nil {
				p.Log.WarnContext(ctx, "could not register idle; polling", "err", err)
			}
			return p.PollInterval, false
		}
		if res.Inserted {
			// A commit that checked just before the registration did not
			// notify: the look once more after it must see that row. A
			// statement begun after the registration committed sees it:
			// reading the registration again (a refresh now, with the
			// heads of the due indexes) is that look, for a few index
			// probes instead of a fetch. The fetch follows when a row is
			// due, or when this second reading is not a plain refresh (a
			// commit took the registration in between: its wake-up is on
			// its way, and the look costs no more than before).
			look, err := register(ctx, p)
			if err != nil || !look.Registered || look.Inserted || look.NextDueIn != nil && *look.NextDueIn <= 0 {
				if err == nil {
					res = look
				}
				w.recheck, w.onceMore = res, true
				return 0, true
			}
			res = look
		}
	}
	if p.Partial && res.NextDueIn != nil && *res.NextDueIn <= 0 {
		notNow := *res
		notNow.NextDueIn = nil
		res = &notNow
	}
	w.noteRegistration(res)
	due := res.NextDueIn != nil && *res.NextDueIn <= 0
	if p.LookBeforeRetry && due && res.Registered && (polled && !res.Inserted || retried) {
		// A refresh after an idle poll whose fetch found nothing, or a
		// retry's fetch that found nothing: the due row is another's (a
		// woken listener's, whose own look once more and retry follow it,
		// or a fetch's in flight). Sleep; the next poll looks again.
		w.retry, w.nextDue = 0, time.Time{}
		return p.PollInterval, false
	}
	if !res.Registered || due {
		if p.LookBeforeRetry && due && res.Registered && looked && w.retry >= p.FollowUp {
			// Still due after the whole backoff: fetch it, once; the
			// answer stands for the reading after that fetch.
			w.recheck, w.retried = res, true
			return 0, true
		}
		// A commit was checking at that instant, or a due row's lock was
		// held: look again soon, backing off to the follow-up pace while
		// it lasts (a notification still wakes the owner at once).
		w.retry = min(max(2*w.retry, time.Millisecond), p.FollowUp)
		w.lookFirst = p.LookBeforeRetry && res.Registered
		return w.retry, false
	}
	w.retry = 0
	if res.NextDueIn != nil {
		return min(*res.NextDueIn, p.PollInterval), false
	}
	return p.PollInterval, false
}

// register registers the owner idle, or refreshes its registration
// (repo.OutboxListenerIdle), on the pool: a transaction of its own, so
// that a statement after it sees what it committed.
func register(ctx context.Context, p *IdleParams) (*repo.OutboxListenerIdleResult, error) {
	cctx, cancel := bounded(ctx, p.CallTimeout)
	defer cancel()
	if p.register != nil {
		return p.register(cctx)
	}
	return p.Repo.OutboxListenerIdle(cctx, p.Pool, &repo.OutboxListenerIdleParams{ListenerID: p.ID, TTL: p.TTL()})
}

// fresh returns the sleep when p.TrustFresh lets the owner skip the
// refresh of a young registration.
func (w *Idle) fresh(p *IdleParams) (time.Duration, bool) {
	if !p.TrustFresh || w.refreshed.IsZero() || w.retry > 0 || time.Since(w.refreshed) >= p.TTL()/4 {
		return 0, false
	}
	wait := p.PollInterval
	if !w.nextDue.IsZero() {
		wait = min(wait, time.Until(w.nextDue))
	}
	return wait, wait > 0
}

// noteRegistration remembers a confirmed registration and when its
// answer said the next row comes due.
func (w *Idle) noteRegistration(res *repo.OutboxListenerIdleResult) {
	if !res.Registered {
		w.refreshed, w.nextDue = time.Time{}, time.Time{}
		return
	}
	w.refreshed, w.nextDue = time.Now(), time.Time{}
	if res.NextDueIn != nil {
		w.nextDue = w.refreshed.Add(*res.NextDueIn)
	}
}

// Awake ends id's idle registration as its owner stops or loses LISTEN.
func Awake(ctx context.Context, r *repo.Repo, pool *pgxpool.Pool, log *slog.Logger, id string, timeout time.Duration) {
	actx, cancel := context.WithTimeout(context.WithoutCancel(ctx), timeout)
	defer cancel()
	if err := r.OutboxListenerAwake(actx, pool, &repo.OutboxListenerAwakeParams{ListenerID: id}); err != nil {
		log.WarnContext(ctx, "could not end the idle registration; it expires", "err", err)
	}
}
