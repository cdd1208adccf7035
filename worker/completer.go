package worker

import (
	"context"
	"log/slog"

	"github.com/google/uuid"

	"github.com/knowledgefs/kfsdb/kfstype"
	"github.com/knowledgefs/kfsdb/repo"
)

// outcomeHandedOff is what a Run slot's process returns when the
// completer took over the delivery; the completer reports the real
// outcome.
const outcomeHandedOff Outcome = "handed_off"

// pendingCompletion is a delivery whose handler returned nil, waiting for
// its completion to be recorded.
type pendingCompletion struct {
	c   completion
	msg Message
	log *slog.Logger
	res Result
	// end ends the delivery's trace span (see Tracer), nil without one.
	end func(Result)
}

// completer records the completions Run's slots hand it, those that
// arrive while a statement is in flight together in the next one
// (repo.CompleteMany), and then settles each delivery as process would:
// acknowledged after the commit, a refused completion failed, a failed
// write handed back. A slot does not wait for it, so each attempt costs
// its slot one commit (the lease) instead of two, and the completions
// share theirs. Should the process die first, the attempts stay leased
// and unacknowledged, and are redelivered after their leases.
type completer struct {
	w    *Worker
	ctx  context.Context // Run's, for logging
	in   chan *pendingCompletion
	done chan struct{}
}

func (w *Worker) startCompleter(ctx context.Context) *completer {
	c := &completer{w: w, ctx: ctx, in: make(chan *pendingCompletion, w.cfg.Concurrency), done: make(chan struct{})}
	go c.run()
	return c
}

// submit blocks while the completer is a full queue behind, which slows
// the slots down to what it can record.
func (c *completer) submit(p *pendingCompletion) { c.in <- p }

// close records what was submitted and returns; call it once no slot runs.
func (c *completer) close() {
	close(c.in)
	<-c.done
}

func (c *completer) run() {
	defer close(c.done)
	batch := make([]*pendingCompletion, 0, repo.MaxBatchSize)
	for p := range c.in {
		batch = append(batch[:0], p)
	fill:
		for len(batch) < repo.MaxBatchSize {
			select {
			case p, ok := <-c.in:
				if !ok {
					break fill
				}
				batch = append(batch, p)
			default:
				break fill
			}
		}
		c.flush(batch)
	}
}

// flush records a batch in one statement. A repeat of an attempt already
// in the batch, a batch of one, and every entry of a batch whose statement
// failed as a whole go one by one, so each gets its own answer.
func (c *completer) flush(batch []*pendingCompletion) {
	w := c.w
	wctx, cancel := context.WithTimeout(context.WithoutCancel(c.ctx), w.cfg.WriteTimeout)
	defer cancel()
	errs := make([]error, len(batch))
	attempts := make([]*kfstype.Attempt, len(batch))
	var first, repeats []int
	seen := make(map[uuid.UUID]bool, len(batch))
	for i, p := range batch {
		if id := p.c.lease.AttemptID; seen[id] {
			repeats = append(repeats, i)
		} else {
			seen[id] = true
			first = append(first, i)
		}
	}
	if len(first) > 1 {
		entries := make([]repo.CompleteManyEntry, len(first))
		for j, i := range first {
			entries[j] = batch[i].c.entry()
		}
		if res, err := w.cfg.Repo.CompleteMany(wctx, w.pool, &repo.CompleteManyParams{Entries: entries}); err == nil {
			for j, i := range first {
				attempts[i], errs[i] = res[j].Attempt, res[j].Err
			}
			first = nil
		}
	}
	for _, i := range append(first, repeats...) {
		attempts[i], errs[i] = w.complete(wctx, batch[i].c)
	}
	for i, p := range batch {
		res := w.completed(c.ctx, wctx, p.log, p.msg, p.c.lease, attempts[i], errs[i], p.res)
		if p.end != nil {
			p.end(res)
		}
		w.finish(res)
	}
}

// entry is the completion as a repo.CompleteMany entry.
func (c completion) entry() repo.CompleteManyEntry {
	e := repo.CompleteManyEntry{Lease: c.lease}
	if t := c.through; t != nil {
		e.Through, e.CandidatePublicationID, e.CandidateFingerprint = true, t.CandidatePublicationID, t.CandidateFingerprint
	}
	return e
}
