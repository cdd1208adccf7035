// Command kfsdb-partition is the process the partition tests
// (tests/partition) cut off from PostgreSQL: a kfsdb worker or relay,
// built statically and run in a container of its own. It prints what it
// does as JSON lines on stdout (partition.Event) and logs to stderr; the
// test opens its gate with SIGUSR1 (partition.Gate) once the route to the
// database is back.
//
//	kfsdb-partition worker --database-url URL --id ID --lease 3s --handler honour|ignore --candidate ID,FINGERPRINT
//
// runs one worker (pgsource, one slot) whose handler reports its first
// lease, then waits: "honour" until its context ends, "ignore" until the
// gate, past its context's end, and then writes progress under the lease
// it held. Once the gate is open and the delivery settled, the program
// makes every late write a cut-off worker could (heartbeat, progress,
// outcome) under that lease, reports whether each was refused, and works
// on: every later attempt it compiles and completes (binding the
// candidate), so that the test sees it recover, until SIGTERM.
//
//	kfsdb-partition relay --database-url URL --id ID --lock 3s
//
// runs one relay whose publisher holds every claimed row's publication
// until the gate, so that the test can cut it off between its claim and
// its mark; after the gate it marks them (late), reports its counters and
// relays on (publications pass the open gate), so that the test sees it
// recover, until SIGTERM.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/knowledgefs/kfsdb/kfstype"
	"github.com/knowledgefs/kfsdb/observe"
	"github.com/knowledgefs/kfsdb/pgsource"
	"github.com/knowledgefs/kfsdb/relay"
	"github.com/knowledgefs/kfsdb/repo"
	"github.com/knowledgefs/kfsdb/tests/partition"
	"github.com/knowledgefs/kfsdb/tests/testfactory"
	"github.com/knowledgefs/kfsdb/worker"
)

// writeTimeout bounds each late write: the route is back by then, so a
// write that takes longer is a hang, reported as an error, not a refusal.
const writeTimeout = 30 * time.Second

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:])
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "kfsdb-partition:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, args []string) error {
	if len(args) == 0 {
		return errors.New("usage: kfsdb-partition worker|relay [flags]")
	}
	fs := flag.NewFlagSet(args[0], flag.ContinueOnError)
	url := fs.String("database-url", "", "PostgreSQL URL")
	id := fs.String("id", "", "worker or relay id")
	lease := fs.Duration("lease", 3*time.Second, "worker: lease duration")
	honour := fs.String("handler", "honour", "worker: honour (return when the context ends) or ignore (run on until the gate)")
	lock := fs.Duration("lock", 3*time.Second, "relay: claim lock duration")
	candidate := fs.String("candidate", "", "worker: the candidate publication later attempts bind, as id,fingerprint")
	if err := fs.Parse(args[1:]); err != nil {
		return err
	}
	if *url == "" || *id == "" {
		return errors.New("--database-url and --id are required")
	}
	gate := openGate()
	out := &emitter{w: os.Stdout}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	pool, err := pgxpool.New(ctx, *url)
	if err != nil {
		return err
	}
	defer pool.Close()
	counts := &counters{m: map[string]int64{}}
	switch args[0] {
	case "worker":
		if *honour != "honour" && *honour != "ignore" {
			return fmt.Errorf("--handler must be honour or ignore, not %q", *honour)
		}
		cand, err := parseCandidate(*candidate)
		if err != nil {
			return err
		}
		h := &handler{out: out, counts: counts, gate: gate, honour: *honour == "honour", candidate: cand}
		return runWorker(ctx, pool, out, log, counts, gate, h, *id, *lease)
	case "relay":
		return runRelay(ctx, pool, out, log, counts, gate, *id, *lock)
	default:
		return fmt.Errorf("unknown command %q", args[0])
	}
}

func parseCandidate(s string) (testfactory.Candidate, error) {
	id, fp, ok := strings.Cut(s, ",")
	u, err := uuid.Parse(id)
	if !ok || err != nil {
		return testfactory.Candidate{}, fmt.Errorf("--candidate must be id,fingerprint, not %q", s)
	}
	return testfactory.Candidate{ID: u, Fingerprint: fp}, nil
}

// openGate returns a channel closed at the first partition.Gate signal.
func openGate() <-chan struct{} {
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGUSR1)
	gate := make(chan struct{})
	go func() {
		<-sigs
		signal.Stop(sigs)
		close(gate)
	}()
	return gate
}

func wait(ctx context.Context, ch <-chan struct{}) error {
	select {
	case <-ch:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// emitter prints events, one JSON object per line.
type emitter struct {
	mu sync.Mutex
	w  io.Writer
}

func (e *emitter) emit(ev partition.Event) {
	if ev.At.IsZero() {
		ev.At = time.Now()
	}
	b, _ := json.Marshal(ev)
	e.mu.Lock()
	defer e.mu.Unlock()
	fmt.Fprintf(e.w, "%s\n", b)
}

// counters is observe.Metrics, and counts late writes too.
type counters struct {
	mu sync.Mutex
	m  map[string]int64
}

func (c *counters) Add(name observe.Counter, n int64) { c.add(string(name), n) }

func (c *counters) add(name string, n int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.m[name] += n
}

func (c *counters) snapshot() map[string]int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make(map[string]int64, len(c.m))
	for k, v := range c.m {
		out[k] = v
	}
	return out
}

// handler holds its first attempt past the partition. It records the
// lease it held when its context ended: the lease the late writes use.
// Later attempts it compiles and completes.
type handler struct {
	out       *emitter
	counts    *counters
	gate      <-chan struct{}
	honour    bool
	candidate testfactory.Candidate
	mu        sync.Mutex
	job       *worker.Job
	lease     *repo.Lease
}

func (h *handler) Work(ctx context.Context, job *worker.Job) error {
	l := job.Lease()
	h.mu.Lock()
	first := h.job == nil
	if first {
		h.job, h.lease = job, l
	}
	h.mu.Unlock()
	if !first {
		h.out.emit(partition.Event{Event: partition.EventRunning, Attempt: l.AttemptID, Token: l.Token, ExpiresAt: l.ExpiresAt})
		return testfactory.CompileJob(ctx, job, h.candidate, nil)
	}
	ended := make(chan struct{})
	context.AfterFunc(ctx, func() {
		cur := job.Lease()
		h.mu.Lock()
		h.lease = cur
		h.mu.Unlock()
		h.out.emit(partition.Event{Event: partition.EventContextEnded, Attempt: cur.AttemptID, Token: cur.Token,
			ExpiresAt: cur.ExpiresAt, Cause: fmt.Sprint(context.Cause(ctx))})
		close(ended)
	})
	h.out.emit(partition.Event{Event: partition.EventRunning, Attempt: l.AttemptID, Token: l.Token, ExpiresAt: l.ExpiresAt})
	if h.honour {
		<-ended
		return ctx.Err()
	}
	// A handler that ignores its context: it runs on through the
	// partition and, once the route is back, writes its progress through
	// its Job as if nothing had happened.
	<-h.gate
	wctx, cancel := context.WithTimeout(context.Background(), writeTimeout)
	defer cancel()
	lateWrite(h.out, h.counts, partition.WriteProgress, job.Lease(), job.Advance(wctx, nextCheckpoint(job.Attempt)))
	return nil
}

func nextCheckpoint(a *kfstype.Attempt) kfstype.Checkpoint {
	return kfstype.Checkpoints()[a.Checkpoint.Rank()+1]
}

// lateWrite reports a write made under lease after the lease was lost.
func lateWrite(out *emitter, counts *counters, write string, lease *repo.Lease, err error) {
	ev := partition.Event{Event: partition.EventLateWrite, Write: write, Attempt: lease.AttemptID, Token: lease.Token,
		Refused: errors.Is(err, repo.ErrLeaseLost)}
	switch {
	case ev.Refused:
		counts.add("late_"+write+"_refused", 1)
	case err == nil:
		counts.add("late_"+write+"_accepted", 1)
	default:
		counts.add("late_"+write+"_error", 1)
	}
	if err != nil {
		ev.Err = err.Error()
	}
	out.emit(ev)
}

func runWorker(ctx context.Context, pool *pgxpool.Pool, out *emitter, log *slog.Logger, counts *counters, gate <-chan struct{},
	h *handler, id string, lease time.Duration) error {
	src, err := pgsource.New(pool, &pgsource.Config{Logger: log, Metrics: counts})
	if err != nil {
		return err
	}
	w, err := worker.New(pool, src, h, &worker.Config{ID: id, LeaseDuration: lease, Concurrency: 1, Logger: log, Metrics: counts})
	if err != nil {
		return err
	}
	w.TestSignals().Processed.Init()
	wctx, stopWorker := context.WithCancel(ctx)
	defer stopWorker()
	done := make(chan error, 1)
	go func() { done <- w.Run(wctx) }()

	// Every delivery's result is an event; the first one is the held
	// attempt's.
	first := make(chan struct{})
	go func() {
		for i := 0; ; i++ {
			select {
			case res := <-w.TestSignals().Processed.C():
				out.emit(partition.Event{Event: partition.EventProcessed, Attempt: res.AttemptID, Outcome: string(res.Outcome), Err: fmt.Sprint(res.Err)})
				if i == 0 {
					close(first)
				}
			case <-wctx.Done():
				return
			}
		}
	}()
	if err := wait(ctx, first); err != nil {
		return err
	}
	if err := wait(ctx, gate); err != nil {
		return err
	}
	h.mu.Lock()
	job, held := h.job, h.lease
	h.mu.Unlock()
	// Every write a worker that missed its lease's end could still try,
	// through the lease it last held: each must be refused.
	r := repo.New(nil)
	wctx2, cancel := context.WithTimeout(context.Background(), 3*writeTimeout)
	defer cancel()
	_, err = r.Heartbeat(wctx2, pool, &repo.HeartbeatParams{Lease: held, LeaseDuration: lease})
	lateWrite(out, counts, partition.WriteHeartbeat, held, err)
	_, err = r.Advance(wctx2, pool, &repo.AdvanceParams{Lease: held, Checkpoint: nextCheckpoint(job.Attempt)})
	lateWrite(out, counts, partition.WriteProgress, held, err)
	_, err = r.Complete(wctx2, pool, &repo.CompleteParams{Lease: held})
	lateWrite(out, counts, partition.WriteOutcome, held, err)
	out.emit(partition.Event{Event: partition.EventReport, Counts: counts.snapshot()})
	// Work on until stopped: the test checks that the worker recovered.
	<-ctx.Done()
	stopWorker()
	<-done
	return nil
}

// gatePublisher holds each publication until the gate opens, ignoring
// its context as a broker client stuck on the same partition might: the
// relay stays between its claim and its mark for as long as the test
// wants, with no sleep.
type gatePublisher struct {
	out  *emitter
	gate <-chan struct{}
	id   string
}

func (p *gatePublisher) Publish(_ context.Context, m *relay.Message) (*relay.Publication, error) {
	p.out.emit(partition.Event{Event: partition.EventPublishing, Attempt: m.AttemptID, OutboxID: m.ID, LockToken: m.LockToken})
	<-p.gate
	jobID := p.id + "-" + m.ID.String()
	p.out.emit(partition.Event{Event: partition.EventPublished, Attempt: m.AttemptID, OutboxID: m.ID, LockToken: m.LockToken, JobID: jobID})
	return &relay.Publication{QueueJobID: jobID}, nil
}

func runRelay(ctx context.Context, pool *pgxpool.Pool, out *emitter, log *slog.Logger, counts *counters, gate <-chan struct{},
	id string, lock time.Duration) error {
	r, err := relay.New(pool, &gatePublisher{out: out, gate: gate, id: id}, &relay.Config{
		ID: id, LockDuration: lock, PublishTimeout: lock / 2, Logger: log, Metrics: counts,
		// Room for the pool to drop the dead connections it may hand out
		// first (one ping timeout each) before the late mark goes through.
		WriteTimeout: writeTimeout,
	})
	if err != nil {
		return err
	}
	r.TestSignals().BatchDone.Init()
	rctx, stopRelay := context.WithCancel(ctx)
	defer stopRelay()
	done := make(chan error, 1)
	go func() { done <- r.Run(rctx) }()
	// The first batch is the one held at the gate; once it is marked (or
	// its mark refused) the relay has done its late write.
	select {
	case <-r.TestSignals().BatchDone.C():
	case <-ctx.Done():
		return ctx.Err()
	}
	out.emit(partition.Event{Event: partition.EventReport, Counts: counts.snapshot()})
	// Relay on until stopped: the test checks that the relay recovered.
	<-ctx.Done()
	stopRelay()
	<-done
	return nil
}
