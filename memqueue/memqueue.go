// Package memqueue is an in-process queue: a relay.Publisher that delivers
// to workers as a worker.Source. It is for the demo, tests and single-
// process deployments; a real broker plugs into the same two interfaces.
//
// Delivery is at least once, like a broker's: a message handed back with
// Retry is delivered again at its time, an unacknowledged one is not
// redelivered by the queue itself (the outbox's visibility timeout
// republishes it).
package memqueue

import (
	"container/heap"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/knowledgefs/kfsdb/internal/runcfg"
	"github.com/knowledgefs/kfsdb/kfstype"
	"github.com/knowledgefs/kfsdb/relay"
	"github.com/knowledgefs/kfsdb/repo"
	"github.com/knowledgefs/kfsdb/worker"
)

// ErrOutage is returned by Publish while an outage is simulated.
var ErrOutage = errors.New("memqueue: broker unavailable")

// Queue is safe for concurrent use. The zero value is not usable; call New.
type Queue struct {
	mu      sync.Mutex
	items   pending
	wake    chan struct{}
	prefix  string // "mem-<random>-": job IDs stay unique across queues
	seq     atomic.Int64
	outage  atomic.Bool
	pubs    atomic.Int64
	acks    atomic.Int64
	retries atomic.Int64
}

// New returns an empty queue.
// Its job IDs are "mem-<8 random hex digits>-<n>": unique across queues,
// so attempts published by several processes' queues on one database
// never share a queue_job_id (a republished attempt is then told apart
// from its earlier delivery by its job ID alone).
func New() *Queue {
	return &Queue{wake: make(chan struct{}, 1), prefix: fmt.Sprintf("mem-%08x-", rand.Uint32())}
}

// usable refuses a Queue not made by New and a nil context, as relay's
// and worker's values do (a *repo.InputError), and an ended ctx.
func (q *Queue) usable(ctx context.Context) error {
	if err := runcfg.Usable(ctx, "memqueue", "Queue", q != nil && q.wake != nil); err != nil {
		return err
	}
	return ctx.Err()
}

// SetOutage makes Publish fail (true) or work again (false). It does
// nothing on a nil Queue.
func (q *Queue) SetOutage(down bool) {
	if q != nil {
		q.outage.Store(down)
	}
}

// Stats reports messages published, acknowledged and handed back (zero
// for a nil Queue).
func (q *Queue) Stats() (published, acked, retried int64) {
	if q == nil {
		return 0, 0, 0
	}
	return q.pubs.Load(), q.acks.Load(), q.retries.Load()
}

// Len is the number of messages waiting (visible or not).
func (q *Queue) Len() int {
	if q == nil {
		return 0
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	return len(q.items)
}

// Publish implements relay.Publisher: the message is visible at once under
// a new queue job id.
func (q *Queue) Publish(ctx context.Context, msg *relay.Message) (*relay.Publication, error) {
	if err := q.usable(ctx); err != nil {
		return nil, err
	}
	if msg == nil {
		return nil, errors.New("memqueue: msg is nil")
	}
	if q.outage.Load() {
		return nil, ErrOutage
	}
	id := fmt.Sprintf("%s%d", q.prefix, q.seq.Add(1))
	// The trace context rides beside the payload, as a broker's message
	// headers would carry it.
	q.push(&message{q: q, delivery: repo.Delivery{AttemptID: msg.AttemptID, QueueJobID: id}, trace: msg.TraceContext, visibleAt: time.Now()})
	q.pubs.Add(1)
	return &relay.Publication{QueueJobID: id}, nil
}

// Inject enqueues an arbitrary delivery (tests use it to forge stale or
// duplicate deliveries). It does nothing on a nil Queue.
func (q *Queue) Inject(d repo.Delivery) {
	if q == nil {
		return
	}
	q.push(&message{q: q, delivery: d, visibleAt: time.Now()})
}

func (q *Queue) push(m *message) {
	q.mu.Lock()
	heap.Push(&q.items, m)
	q.mu.Unlock()
	select {
	case q.wake <- struct{}{}:
	default:
	}
}

// Receive implements worker.Source.
func (q *Queue) Receive(ctx context.Context) (worker.Message, error) {
	if err := q.usable(ctx); err != nil {
		return nil, err
	}
	for {
		q.mu.Lock()
		var wait time.Duration = -1
		if len(q.items) > 0 {
			top := q.items[0]
			if d := time.Until(top.visibleAt); d <= 0 {
				heap.Pop(&q.items)
				q.mu.Unlock()
				// Pass the wake-up on: more may be visible.
				select {
				case q.wake <- struct{}{}:
				default:
				}
				return top, nil
			} else {
				wait = d
			}
		}
		q.mu.Unlock()
		var timer *time.Timer
		var fire <-chan time.Time
		if wait >= 0 {
			timer = time.NewTimer(wait)
			fire = timer.C
		}
		select {
		case <-ctx.Done():
		case <-q.wake:
		case <-fire:
		}
		if timer != nil {
			timer.Stop()
		}
		if err := ctx.Err(); err != nil {
			return nil, err
		}
	}
}

type message struct {
	q         *Queue
	delivery  repo.Delivery
	trace     kfstype.TraceContext
	visibleAt time.Time
	done      atomic.Bool
}

func (m *message) Delivery() repo.Delivery { return m.delivery }

// TraceContext implements worker.TracedMessage: what the publisher put in
// relay.Message.TraceContext.
func (m *message) TraceContext() kfstype.TraceContext { return m.trace }

func (m *message) Ack(context.Context) error {
	if !m.done.CompareAndSwap(false, true) {
		return errors.New("memqueue: message already settled")
	}
	m.q.acks.Add(1)
	return nil
}

func (m *message) Retry(_ context.Context, notBefore time.Time) error {
	if !m.done.CompareAndSwap(false, true) {
		return errors.New("memqueue: message already settled")
	}
	m.q.retries.Add(1)
	m.q.push(&message{q: m.q, delivery: m.delivery, trace: m.trace, visibleAt: notBefore})
	return nil
}

// pending is a min-heap of messages by visibility time.
type pending []*message

func (p pending) Len() int           { return len(p) }
func (p pending) Less(i, j int) bool { return p[i].visibleAt.Before(p[j].visibleAt) }
func (p pending) Swap(i, j int)      { p[i], p[j] = p[j], p[i] }
func (p *pending) Push(x any)        { *p = append(*p, x.(*message)) }
func (p *pending) Pop() any {
	old := *p
	n := len(old)
	m := old[n-1]
	old[n-1] = nil
	*p = old[:n-1]
	return m
}
