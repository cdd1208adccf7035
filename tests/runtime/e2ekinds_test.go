package runtime_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"

	"github.com/knowledgefs/kfsdb/kfstype"
	"github.com/knowledgefs/kfsdb/memqueue"
	"github.com/knowledgefs/kfsdb/relay"
	"github.com/knowledgefs/kfsdb/repo"
)

// e2eKind is the fate injected into one attempt of the end-to-end run.
type e2eKind int

const (
	kindSuccess     e2eKind = iota
	kindRetryOnce           // retryable on the first run, succeeds on the second
	kindFatal               // worker.Fatal with a custom code
	kindPanic               // the handler panics
	kindAlwaysRetry         // always retryable, MaxExecutionAttempts 2
	kindDying               // first delivery diverted to a worker that takes the lease and dies
	kindPublishFail         // every publication fails: dead-lettered
	kindCancel              // canceled from the control plane while running
	kindSupersede           // superseded from the control plane while running
	numKinds
)

func (k e2eKind) String() string {
	return [...]string{"success", "retry_once", "fatal", "panic", "always_retry", "dying_worker", "publish_fail", "cancel", "supersede"}[k]
}

// kindOf spreads the kinds over the attempts deterministically: every
// special kind gets one index of each 20, the rest succeed.
func kindOf(i int) e2eKind {
	if k := e2eKind(i%20) + 1; k < numKinds {
		return k
	}
	return kindSuccess
}

// e2eExpect is what an attempt of each kind must end as.
type e2eExpect struct {
	State        kfstype.RunState
	Code         string // "" for none checked
	HandlerRuns  int
	ExecAttempts int32
}

const e2eFatalCode = "E2E_FATAL"

var e2eExpected = map[e2eKind]e2eExpect{
	kindSuccess:     {kfstype.RunStateSucceeded, "", 1, 1},
	kindRetryOnce:   {kfstype.RunStateSucceeded, "", 2, 2},
	kindFatal:       {kfstype.RunStateFailed, e2eFatalCode, 1, 1},
	kindPanic:       {kfstype.RunStateFailed, kfstype.ErrorCodeHandlerPanic, 1, 1},
	kindAlwaysRetry: {kfstype.RunStateFailed, kfstype.ErrorCodeExecutionAttemptsExhausted, 2, 2},
	kindDying:       {kfstype.RunStateSucceeded, "", 1, 2}, // the abandoned lease ran no handler
	kindPublishFail: {kfstype.RunStateFailed, kfstype.ErrorCodeOutboxDead, 0, 0},
	kindCancel:      {kfstype.RunStateCanceled, kfstype.ErrorCodeCanceled, 1, 1},
	kindSupersede:   {kfstype.RunStateSuperseded, kfstype.ErrorCodeSuperseded, 1, 1},
}

// e2ePublisher wraps the memqueue: it fails every publication of
// publish-fail attempts, diverts the first publication of dying-worker
// attempts to a channel (the queue never sees it), and counts the outage's
// refusals.
type e2ePublisher struct {
	q       *memqueue.Queue
	kinds   map[uuid.UUID]e2eKind
	outage  atomic.Bool
	refused atomic.Int64
	divert  chan repo.Delivery

	mu       sync.Mutex
	diverted map[uuid.UUID]bool
}

// setOutage holds mu, so that a dying-worker publication, decided under
// mu, never sees the flag and the queue disagree.
func (p *e2ePublisher) setOutage(down bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.outage.Store(down)
	p.q.SetOutage(down)
}

func (p *e2ePublisher) Publish(ctx context.Context, msg *relay.Message) (*relay.Publication, error) {
	kind := p.kinds[msg.AttemptID]
	if kind == kindPublishFail {
		return nil, errors.New("injected publish failure")
	}
	if kind == kindDying {
		p.mu.Lock()
		down, first := p.outage.Load(), !p.diverted[msg.AttemptID]
		if !down {
			p.diverted[msg.AttemptID] = true
		}
		p.mu.Unlock()
		switch {
		case down:
			// Refused here, not by the queue: the outage could end between
			// this read and the queue's, and the first publication would
			// then reach the queue instead of the dying worker (seen once
			// on a loaded machine: the attempt ran once, never abandoned).
			p.refused.Add(1)
			return nil, memqueue.ErrOutage
		case first:
			id := "diverted-" + uuid.NewString()
			p.divert <- repo.Delivery{AttemptID: msg.AttemptID, QueueJobID: id}
			return &relay.Publication{QueueJobID: id}, nil
		}
	}
	pub, err := p.q.Publish(ctx, msg)
	if errors.Is(err, memqueue.ErrOutage) {
		p.refused.Add(1)
	}
	return pub, err
}

// handlerRun is one call of the handler, with the lease it ran under.
type handlerRun struct {
	AttemptID uuid.UUID
	Worker    string
	Token     uuid.UUID
	Acquired  time.Time // heartbeat_at written by AcquireLease (database clock)
}

// controlRequest asks the control plane to end a running attempt.
type controlRequest struct {
	AttemptID uuid.UUID
	Kind      e2eKind
	Done      chan struct{}
}

func kindSummary(m map[e2eKind]int) string {
	var parts []string
	for k := range numKinds {
		parts = append(parts, fmt.Sprintf("%s=%d", k, m[k]))
	}
	return strings.Join(parts, " ")
}
