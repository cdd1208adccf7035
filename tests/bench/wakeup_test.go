package bench

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/knowledgefs/kfsdb/relay"
	"github.com/knowledgefs/kfsdb/repo"
)

// publishSignal is a relay.Publisher that records when it published each
// attempt.
type publishSignal struct {
	mu   sync.Mutex
	at   map[uuid.UUID]time.Time
	poke chan struct{}
}

func (p *publishSignal) Publish(_ context.Context, m *relay.Message) (*relay.Publication, error) {
	p.mu.Lock()
	p.at[m.AttemptID] = time.Now()
	p.mu.Unlock()
	select {
	case p.poke <- struct{}{}:
	default:
	}
	return &relay.Publication{QueueJobID: "job-" + m.ID.String()}, nil
}

// wait returns when attempt id was published.
func (p *publishSignal) wait(b *testing.B, id uuid.UUID) time.Time {
	deadline := time.After(30 * time.Second)
	for {
		p.mu.Lock()
		at, ok := p.at[id]
		p.mu.Unlock()
		if ok {
			return at
		}
		select {
		case <-p.poke:
		case <-deadline:
			b.Fatal("the relay did not publish within 30 s")
		}
	}
}

// BenchmarkWakeup measures how long an idle relay (poll interval 10 s, so
// only a wake-up is fast) takes to publish a row that just became due: a
// Start on the pool (from before the call), a Start in the caller's
// transaction (from its commit), and a due row that another transaction
// held locked while the relay went idle (from the unlock). One operation
// is one wake-up; ns/op is the latency, the time the relay needs to go
// idle between operations is not counted.
func BenchmarkWakeup(b *testing.B) {
	requireEnv(b)
	for _, start := range []string{"pool", "tx", "locked-row"} {
		b.Run("start="+start, func(b *testing.B) { benchWakeup(b, start) })
	}
}

func benchWakeup(b *testing.B, start string) {
	ctx := context.Background()
	r := repo.New(nil)
	fs := setupFixtures(b, b.N, state{})
	b.StopTimer()
	pub := &publishSignal{at: map[uuid.UUID]time.Time{}, poke: make(chan struct{}, 1)}
	rl, err := relay.New(env.pool, pub, &relay.Config{PollInterval: 10 * time.Second})
	if err != nil {
		b.Fatal(err)
	}
	rctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); _ = rl.Run(rctx) }()
	defer func() { cancel(); <-done }()

	params := func(i int) *repo.StartParams {
		return &repo.StartParams{TenantID: benchTenant, KnowledgeSpaceID: fs.SpaceID,
			DocumentAssetID: fs.Items[i].AssetID, DocumentVersion: 1, PublicationGenerationID: fs.GenerationID}
	}
	// waitIdle returns once the relay is registered idle and asleep.
	waitIdle := func() {
		for {
			var idle bool
			if err := env.pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM document_compilation_outbox_idle_listeners WHERE listener_id = $1)`, rl.ID()).Scan(&idle); err != nil {
				b.Fatal(err)
			}
			if idle {
				time.Sleep(5 * time.Millisecond)
				return
			}
			time.Sleep(time.Millisecond)
		}
	}
	var total time.Duration
	for i := range b.N {
		waitIdle()
		var t0 time.Time
		var id uuid.UUID
		switch start {
		case "pool":
			t0 = time.Now()
			res, err := r.Start(ctx, env.pool, params(i))
			if err != nil {
				b.Fatal(err)
			}
			id = res.Attempt.ID
		case "tx":
			tx, err := env.pool.Begin(ctx)
			if err != nil {
				b.Fatal(err)
			}
			res, err := r.Start(ctx, tx, params(i))
			if err != nil {
				b.Fatal(err)
			}
			id = res.Attempt.ID
			t0 = time.Now()
			if err := tx.Commit(ctx); err != nil {
				b.Fatal(err)
			}
		case "locked-row":
			p := params(i)
			p.AvailableAt = new(time.Now().Add(20 * time.Millisecond))
			res, err := r.Start(ctx, env.pool, p)
			if err != nil {
				b.Fatal(err)
			}
			id = res.Attempt.ID
			holder, err := env.pool.Begin(ctx)
			if err != nil {
				b.Fatal(err)
			}
			if _, err := holder.Exec(ctx, `SELECT 1 FROM document_compilation_outbox WHERE attempt_id = $1 FOR UPDATE`, res.Attempt.ID); err != nil {
				b.Fatal(err)
			}
			time.Sleep(60 * time.Millisecond) // due, and passed over by the relay
			t0 = time.Now()
			if err := holder.Commit(ctx); err != nil {
				b.Fatal(err)
			}
		}
		total += pub.wait(b, id).Sub(t0)
	}
	b.StopTimer()
	// ns/op is the wake-up latency alone, not the waits between them.
	b.ReportMetric(float64(total.Nanoseconds())/float64(b.N), "ns/op")
}
