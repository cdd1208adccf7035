package pgsource

import (
	"context"
	"errors"
	"log/slog"
	"math/rand/v2"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/knowledgefs/kfsdb/internal/backoff"
	"github.com/knowledgefs/kfsdb/internal/keptconn"
	"github.com/knowledgefs/kfsdb/internal/nilvalue"
	"github.com/knowledgefs/kfsdb/internal/pglisten"
	"github.com/knowledgefs/kfsdb/internal/runcfg"
	"github.com/knowledgefs/kfsdb/kfstype"
	"github.com/knowledgefs/kfsdb/observe"
	"github.com/knowledgefs/kfsdb/repo"
	"github.com/knowledgefs/kfsdb/worker"
)

// Run implements worker.LeasingSource: it fetches for the slots waiting
// in Receive until ctx ends, then hands back the leases no slot took and
// returns ctx.Err(). worker.Run calls it; call it yourself only when you
// drive Receive without a worker.Worker.
func (s *Source) Run(ctx context.Context) error {
	if nilvalue.Is(ctx) {
		return runcfg.Invalid("pgsource", "ctx", "must not be nil")
	}
	requests, err := s.bound()
	if err != nil {
		return err
	}
	if !s.running.CompareAndSwap(false, true) {
		return errors.New("pgsource: Run is running already")
	}
	defer s.running.Store(false)
	if !s.cfg.PollOnly {
		listenDone := make(chan struct{})
		lctx, cancel := context.WithCancel(ctx)
		go func() {
			defer close(listenDone)
			l := &pglisten.Listener{Pool: s.pool, Wake: s.wake, Log: s.log, Name: "source", ID: s.workerID,
				Listening: s.listening.Store, Lost: s.awake, CallTimeout: s.cfg.WriteTimeout}
			l.Listen(lctx)
		}()
		defer func() { cancel(); <-listenDone }()
		defer s.awake(ctx)
	}
	var pending []*request
	defer func() { s.requeue(requests, pending) }()
	l := &fetchLoop{s: s, results: make(chan fetched, maxFetchesInFlight), conns: s.fetchConns()}
	// Deferred before the wait for the fetches in flight, so it runs
	// after it: every kept connection is back in the pool when Run
	// returns.
	defer l.conns.Close()
	// Fetches still in flight as Run stops: their leases go to the slots
	// still waiting, or back (then the requests left are requeued).
	defer func() {
		for ; l.inFlight > 0; l.inFlight-- {
			pending = l.deliver(ctx, pending, <-l.results)
		}
	}()

	timer := time.NewTimer(0)
	defer timer.Stop()
	for {
		pending = s.live(collect(requests, pending))
		if l.full && l.inFlight == 0 && len(pending) < int(s.batchSize) && s.cfg.GatherWindow > 0 {
			// The last fetch filled its batch, so more is due: wait a
			// moment for the slots it served (a short handler returns
			// them within it) and fetch for them too, not only for the
			// few that waited as it came back (Config.GatherWindow).
			l.full = false
			pending = gather(ctx, requests, pending, int(s.batchSize), s.cfg.GatherWindow)
			continue
		}
		if l.canStart(len(pending)) {
			l.start(ctx, len(pending))
			continue
		}
		if l.inFlight == 0 && len(pending) == 0 {
			select {
			case <-ctx.Done():
				return ctx.Err()
			case req := <-requests:
				pending = append(pending, req)
			}
			continue
		}
		if l.inFlight == 0 {
			// Short or failed, and nothing in flight: idle.
			wait, poll, again := l.idleWait(ctx)
			if again {
				c := observe.SourceShortWaits // a retry's due row, still due
				if l.idle.OnceMore() {
					c = observe.SourceRechecks
				}
				s.cfg.Metrics.Add(c, 1)
				continue
			}
			woke, err := s.wake.Sleep(ctx, timer, time.Now().Add(wait))
			if err != nil {
				return err
			}
			if l.idle.SkipFetch(woke) {
				// A retry wait for a due row ran out: read the
				// registration again before fetching (LookBeforeRetry);
				// a fetch after it counts as the wait's.
				continue
			}
			s.cfg.Metrics.Add(wokeCounter(woke, poll), 1)
			if woke == pglisten.WokeTimer && poll {
				l.idle.Polled()
			}
			l.short, l.failed = false, false
			continue
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case req := <-requests:
			pending = append(pending, req)
		case f := <-l.results:
			l.inFlight--
			pending = l.deliver(ctx, pending, f)
		}
	}
}

// maxFetchesInFlight is how many fetches a source runs at once: a second
// one for the slots freed while the first is in the database, so the
// slots do not wait on one fetch's round trip and commit at a time.
// FetchLeases offers spares past each tenant's quota, so the two do not
// come back short for each other's locks.
const maxFetchesInFlight = 2

// fetched is one fetch's answer.
type fetched struct {
	n   int32
	res *repo.FetchLeasesResult
	err error
}

// fetchLoop is Run's state: the fetches in flight and what the last ones
// found.
type fetchLoop struct {
	s        *Source
	results  chan fetched
	inFlight int
	// reserved counts the requests the fetches in flight are for.
	reserved int
	// short: a fetch found fewer due rows than asked for (or failed), so
	// no new fetch starts until the source has idled.
	short, failed bool
	// failures counts the fetches that failed in a row: the wait before
	// the next grows with it (backoff.Retry).
	failures int32
	// full: the last fetch filled its batch (Run gathers requests
	// before the next one).
	full  bool
	idle  pglisten.Idle
	after string
	// conns: the connections fetches run on, kept between them.
	conns *keptconn.Set
}

func (l *fetchLoop) canStart(pending int) bool {
	unserved := pending - l.reserved
	if l.short || unserved <= 0 || l.inFlight >= maxFetchesInFlight {
		return false
	}
	// A second fetch only for half a batch or more: many small fetches
	// cost more statements and commits than they save in waiting.
	return l.inFlight == 0 || 2*unserved >= int(l.s.batchSize)
}

func (l *fetchLoop) start(ctx context.Context, pending int) {
	s := l.s
	n := min(int32(pending-l.reserved), s.batchSize)
	l.inFlight++
	l.reserved += int(n)
	after := l.after
	go func() {
		s.cfg.Metrics.Add(observe.Fetches, 1)
		// A connection whose server vanished without a word (a primary lost
		// in a failover, a route withdrawn) answers nothing: the fetch ends
		// by WriteTimeout, not by the kernel's TCP timeout (~15 minutes).
		// Leases a fetch took but never heard of expire and are fetched
		// again.
		fctx, cancel := context.WithTimeout(ctx, s.cfg.WriteTimeout)
		defer cancel()
		conn, err := l.conns.Acquire(fctx)
		if err != nil {
			l.results <- fetched{n: n, err: err}
			return
		}
		res, err := s.cfg.Repo.FetchLeases(fctx, conn, &repo.FetchLeasesParams{
			WorkerID: s.workerID, BatchSize: n, LeaseDuration: s.leaseDuration,
			AfterTenant: after, MaxTenants: s.cfg.MaxTenants, PerTenant: s.cfg.PerTenant,
			TraceContexts: s.cfg.TraceContexts, Tenants: s.cfg.Tenants, ExcludeTenants: s.cfg.ExcludeTenants,
		})
		l.conns.Put(conn, err)
		l.results <- fetched{n: n, res: res, err: err}
	}()
}

// deliver answers pending requests with a fetch's leases (handing back
// those no request is left for) and notes what the fetch found.
func (l *fetchLoop) deliver(ctx context.Context, pending []*request, f fetched) []*request {
	s := l.s
	l.reserved -= int(f.n)
	if f.err != nil {
		if ctx.Err() == nil {
			s.cfg.Metrics.Add(observe.FetchFailed, 1)
			s.log.ErrorContext(ctx, "fetch failed", "err", f.err)
		}
		l.short, l.failed, l.full = true, true, false
		l.failures++
		l.idle.Reset()
		return pending
	}
	res := f.res
	l.failures = 0
	l.after = res.NextAfterTenant
	s.cfg.Metrics.Add(observe.FetchedLeases, int64(len(res.Leased)))
	s.cfg.Metrics.Add(observe.FetchExhausted, int64(len(res.Exhausted)))
	for _, a := range res.Exhausted {
		s.log.WarnContext(ctx, "attempt failed", "attempt_id", a.ID, "tenant_id", a.TenantID, "error_code", kfstype.ErrorCodeExecutionAttemptsExhausted)
	}
	debug := s.log.Enabled(ctx, slog.LevelDebug)
	for _, la := range res.Leased {
		if debug {
			s.log.DebugContext(ctx, "attempt leased", "attempt_id", la.Attempt.ID, "tenant_id", la.Attempt.TenantID, "lease_expires_at", la.Lease.ExpiresAt)
		}
		pending = s.answer(ctx, pending, &message{attempt: la.Attempt, lease: la.Lease, trace: la.TraceContext})
	}
	got := len(res.Leased) + len(res.Exhausted)
	l.full = got >= int(f.n)
	switch {
	case l.full:
		// A full batch: more may be due; the fetch ended the idle
		// registration, so commits do not notify.
		l.idle.Reset()
	case got > 0:
		// Fewer than asked for: nothing more is due now. The
		// registration, if any, is still in place.
		l.idle.Found()
		l.short = true
	default:
		l.short = true
	}
	return pending
}

// wokeCounter is the counter of a sleep's end: woken by a notification,
// or its timer ran out (a whole PollInterval: poll).
func wokeCounter(woke pglisten.Woke, poll bool) observe.Counter {
	switch {
	case woke == pglisten.WokeNamed:
		return observe.SourceWokenNamed
	case woke == pglisten.WokeAll:
		return observe.SourceWokenAll
	case poll:
		return observe.SourceIdlePolls
	default:
		return observe.SourceShortWaits
	}
}

// idleWait decides the sleep after a short or failed fetch (poll: a whole
// PollInterval, possibly jittered); again asks for one more fetch first (a
// new idle registration's look once more found a row due).
func (l *fetchLoop) idleWait(ctx context.Context) (wait time.Duration, poll, again bool) {
	s := l.s
	if l.failed {
		// Not a whole PollInterval (an hour, for an idle fleet): a server
		// back from a failover, or a dead connection replaced, is tried
		// again within seconds.
		return backoff.Retry(l.failures, s.cfg.PollInterval), false, false
	}
	if s.wake.TakeTaken() {
		// A commit took the registration out as it woke this source
		// (migration 0010): register again, and look once more
		// (pglisten.Idle.Next).
		l.idle.Reset()
	}
	wait, again = l.idle.Next(ctx, &pglisten.IdleParams{Repo: s.cfg.Repo, Pool: s.pool, Log: s.log, ID: s.workerID,
		PollInterval: s.cfg.PollInterval, FollowUp: s.cfg.FollowUpInterval, CallTimeout: s.cfg.WriteTimeout,
		Listening: !s.cfg.PollOnly && s.listening.Load(), TrustFresh: true, LookBeforeRetry: true,
		Partial: s.cfg.Tenants != nil || len(s.cfg.ExcludeTenants) > 0})
	if again {
		l.short = false
	}
	if poll = wait == s.cfg.PollInterval; poll {
		wait = jittered(wait, s.cfg.PollJitter, rand.Float64)
	}
	return wait, poll, again
}

// jittered is d shortened by up to frac of it, by r's draw (0 ≤ r() < 1).
func jittered(d time.Duration, frac float64, r func() float64) time.Duration {
	return d - time.Duration(frac*r()*float64(d))
}

// collect adds the requests waiting in the channel to pending.
func collect(requests chan *request, pending []*request) []*request {
	for {
		select {
		case req := <-requests:
			pending = append(pending, req)
		default:
			return pending
		}
	}
}

// live drops the requests whose callers gave up.
func (s *Source) live(pending []*request) []*request {
	s.mu.Lock()
	defer s.mu.Unlock()
	kept := pending[:0]
	for _, req := range pending {
		if !req.abandoned {
			kept = append(kept, req)
		}
	}
	return kept
}

// answer gives m to the first pending request whose caller still waits
// and returns the rest; with none left, m is handed back.
func (s *Source) answer(ctx context.Context, pending []*request, m *message) []*request {
	s.mu.Lock()
	for len(pending) > 0 {
		req := pending[0]
		pending = pending[1:]
		if !req.abandoned {
			req.reply <- m // room for one; only Run sends
			s.mu.Unlock()
			return pending
		}
	}
	s.mu.Unlock()
	s.release(ctx, m)
	return pending
}

// requeue runs as Run stops: requests still waiting go back to the
// channel (a caller whose ctx outlives Run is served by the next Run).
func (s *Source) requeue(requests chan *request, pending []*request) {
	for _, req := range s.live(pending) {
		select {
		case requests <- req:
		default: // the channel is full of newer requests; this caller waits for its ctx
		}
	}
}

// release hands an unstarted lease back for another run: ScheduleRetry
// after a second with WORKER_SHUTDOWN, as a stopping worker does with a
// running one (the fetch counted the execution attempt already).
func (s *Source) release(ctx context.Context, m *message) {
	wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.cfg.WriteTimeout)
	defer cancel()
	s.cfg.Metrics.Add(observe.LeasesHandedBack, 1)
	const code = worker.ErrorCodeWorkerShutdown
	var err error
	if m.attempt.ExecutionAttempts >= m.attempt.MaxExecutionAttempts {
		_, err = s.cfg.Repo.Fail(wctx, s.pool, &repo.FailParams{Lease: m.lease, ErrorCode: kfstype.ErrorCodeExecutionAttemptsExhausted,
			ErrorMessage: "execution attempts exhausted; the last was handed back unstarted by a stopping worker"})
	} else {
		_, err = s.cfg.Repo.ScheduleRetry(wctx, s.pool, &repo.ScheduleRetryParams{Lease: m.lease, RetryDelay: time.Second,
			ErrorCode: code, ErrorMessage: "the worker stopped before running the attempt"})
	}
	if err != nil {
		// The lease expires and the attempt is fetched again then.
		s.log.WarnContext(ctx, "could not hand back an unstarted lease; it expires", "attempt_id", m.attempt.ID, "err", err)
	}
}

// awake ends the source's idle registration.
func (s *Source) awake(ctx context.Context) {
	pglisten.Awake(ctx, s.cfg.Repo, s.pool, s.log, s.workerID, s.cfg.WriteTimeout)
}

// gather adds requests to pending until it holds n or window has passed
// (or ctx ended).
func gather(ctx context.Context, requests chan *request, pending []*request, n int, window time.Duration) []*request {
	t := time.NewTimer(window)
	defer t.Stop()
	for len(pending) < n {
		select {
		case req := <-requests:
			pending = append(pending, req)
		case <-t.C:
			return pending
		case <-ctx.Done():
			return pending
		}
	}
	return pending
}

// fetchConns is the set of connections Run's fetches run on: kept between
// fetches, planning FetchLeases generically on a session of their own
// (internal/keptconn), unless the source polls only (PgBouncer in
// transaction pooling, where a session setting would outlive the fetch on
// a server session other clients share) or pgx does not prepare
// statements.
func (s *Source) fetchConns() *keptconn.Set {
	cfg := s.pool.Config()
	prepared := cfg.ConnConfig.DefaultQueryExecMode == pgx.QueryExecModeCacheStatement
	return keptconn.New(s.pool, keptconn.PerEight(cfg.MaxConns, maxFetchesInFlight), prepared && !s.cfg.PollOnly)
}
