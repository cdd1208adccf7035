package pgsource

import (
	"context"
	"errors"
	"time"

	"github.com/knowledgefs/kfsdb/internal/pglisten"
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
	if ctx == nil {
		return errors.New("pgsource: ctx is nil")
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
			l := &pglisten.Listener{Pool: s.pool, Wake: s.wake, Log: s.log, Name: "source",
				Listening: s.listening.Store, Lost: s.awake}
			l.Listen(lctx)
		}()
		defer func() { cancel(); <-listenDone }()
		defer s.awake(ctx)
	}
	var pending []*request
	defer func() { s.requeue(requests, pending) }()

	timer := time.NewTimer(0)
	defer timer.Stop()
	var idle pglisten.Idle
	after := ""
	for {
		pending = s.live(collect(requests, pending))
		if len(pending) == 0 {
			select {
			case <-ctx.Done():
				return ctx.Err()
			case req := <-requests:
				pending = append(pending, req)
				continue
			}
		}
		n := min(int32(len(pending)), s.batchSize)
		var got int
		got, pending, err = s.fetch(ctx, pending, n, &after)
		if ctx.Err() != nil {
			return ctx.Err()
		}
		var wait time.Duration
		switch {
		case err != nil:
			s.cfg.Metrics.Add(observe.FetchFailed, 1)
			s.log.ErrorContext(ctx, "fetch failed", "err", err)
			idle.Reset()
			wait = s.cfg.PollInterval
		case got >= int(n):
			// A full batch: more may be due. Look again at once; the
			// fetch ended the registration, so commits do not notify.
			idle.Reset()
			continue
		default:
			// Fewer than asked for: nothing more is due now. Idle at once
			// rather than after an empty fetch; the registration, if any,
			// is still in place (only a full batch ends it).
			if got > 0 {
				idle.Found()
			}
			var again bool
			wait, again = idle.Next(ctx, &pglisten.IdleParams{Repo: s.cfg.Repo, Pool: s.pool, Log: s.log, ID: s.workerID,
				PollInterval: s.cfg.PollInterval, FollowUp: s.cfg.FollowUpInterval,
				Listening: !s.cfg.PollOnly && s.listening.Load(), TrustFresh: true})
			if again {
				continue
			}
		}
		if err := s.wake.Sleep(ctx, timer, time.Now().Add(wait)); err != nil {
			return err
		}
	}
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

// fetch leases up to n attempts and answers pending requests with them.
// It returns how many due rows it took (leased or failed as exhausted)
// and the requests still unanswered.
func (s *Source) fetch(ctx context.Context, pending []*request, n int32, after *string) (int, []*request, error) {
	s.cfg.Metrics.Add(observe.Fetches, 1)
	res, err := s.cfg.Repo.FetchLeases(ctx, s.pool, &repo.FetchLeasesParams{
		WorkerID: s.workerID, BatchSize: n, LeaseDuration: s.leaseDuration,
		AfterTenant: *after, MaxTenants: s.cfg.MaxTenants, PerTenant: s.cfg.PerTenant,
	})
	if err != nil {
		return 0, pending, err
	}
	*after = res.NextAfterTenant
	s.cfg.Metrics.Add(observe.FetchedLeases, int64(len(res.Leased)))
	s.cfg.Metrics.Add(observe.FetchExhausted, int64(len(res.Exhausted)))
	for i, a := range res.Leased {
		pending = s.answer(ctx, pending, &message{attempt: a, lease: res.Leases[i]})
	}
	return len(res.Leased) + len(res.Exhausted), pending, nil
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
			ErrorCode: code, ErrorMessage: code + ": the worker stopped before running the attempt"})
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
