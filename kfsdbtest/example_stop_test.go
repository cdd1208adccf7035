package kfsdbtest_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"log/slog"
	"time"

	"github.com/knowledgefs/kfsdb/outcomes"
	"github.com/knowledgefs/kfsdb/pgsource"
	"github.com/knowledgefs/kfsdb/repo"
	"github.com/knowledgefs/kfsdb/worker"
)

// Stop a worker gracefully (worker.Worker.Stop) and hear what it recorded
// (worker.Config.Events). Stop stops fetching at once and lets the running
// handler go on until StopTimeout (or Stop's context) ends; then it
// cancels the handler's context with cause worker.ErrStopTimeout. A
// handler that returns its context's error hands its attempt back for
// another run (WORKER_SHUTDOWN); one that had not returned CancelGrace
// later would be abandoned, its attempt handed back all the same.
// StopAndCancel skips the drain. The report says what became of the
// handlers the stop found running.
func Example_workerStop() {
	ctx := context.Background()
	db, doc := exampleDB()
	defer db.Drop(ctx)
	pool := db.Pool
	r := repo.New(nil)
	res, err := r.Start(ctx, pool, startParams(doc.Asset, 0))
	if err != nil {
		log.Fatal(err)
	}

	src, err := pgsource.New(pool, &pgsource.Config{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		log.Fatal(err)
	}
	running := make(chan struct{})
	h := worker.HandlerFunc(func(ctx context.Context, job *worker.Job) error {
		close(running)
		<-ctx.Done() // a long compilation, cut short by the stop
		fmt.Println("handler canceled, the stop's deadline passed:", errors.Is(context.Cause(ctx), worker.ErrStopTimeout))
		return ctx.Err()
	})
	events := make(chan worker.Event, 16) // buffered: a full channel drops (worker.EventsDropped)
	w, err := worker.New(pool, src, h, &worker.Config{
		StopTimeout: 50 * time.Millisecond, CancelGrace: 5 * time.Second,
		Events: events, Logger: slog.New(slog.DiscardHandler),
	})
	if err != nil {
		log.Fatal(err)
	}
	stopped := make(chan error, 1)
	go func() { stopped <- w.Run(ctx) }()
	<-running

	rep, err := w.Stop(ctx)
	fmt.Printf("Stop: finished %d, canceled %d, abandoned %d, err %v; Run: %v\n", rep.Finished, rep.Canceled, rep.Abandoned, err, <-stopped)
	ev := <-events
	fmt.Println("event:", ev.AttemptID == res.Attempt.ID, ev.Outcome, ev.ErrorCode)
	a, err := r.GetAttempt(ctx, pool, &repo.GetAttemptParams{TenantID: "acme", AttemptID: res.Attempt.ID})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("attempt:", a.RunState, *a.LastErrorCode)
	// Output:
	// handler canceled, the stop's deadline passed: true
	// Stop: finished 0, canceled 1, abandoned 0, err <nil>; Run: <nil>
	// event: true released WORKER_SHUTDOWN
	// attempt: retry_wait WORKER_SHUTDOWN
}

// Hear, in any process, that an attempt ended (package outcomes):
// migration 0012's trigger, off until the table's owner enables it,
// notifies channel kfsdb_outcomes at the commit of every transition that
// ends an attempt, whoever made it. Read what you wait for once LISTEN is
// in place (ListenConfig.Listening): an ending committed before is not
// delivered.
func Example_outcomeNotifications() {
	ctx := context.Background()
	db, doc := exampleDB()
	defer db.Drop(ctx)
	pool := db.Pool
	if err := outcomes.Enable(ctx, pool, 5*time.Second); err != nil {
		log.Fatal(err)
	}

	ended := make(chan outcomes.Outcome, 16)
	listening := make(chan struct{})
	lctx, stopListening := context.WithCancel(ctx)
	listened := make(chan error, 1)
	go func() {
		listened <- outcomes.Listen(lctx, pool, func(o outcomes.Outcome) { ended <- o },
			&outcomes.ListenConfig{Listening: func() { close(listening) }})
	}()
	<-listening

	r := repo.New(nil)
	res, err := r.Start(ctx, pool, startParams(doc.Asset, 0))
	if err != nil {
		log.Fatal(err)
	}
	reason := "document deleted"
	ref := repo.AttemptRef{TenantID: "acme", KnowledgeSpaceID: doc.Space.ID, AttemptID: res.Attempt.ID}
	if _, err := r.Cancel(ctx, pool, &repo.CancelParams{AttemptRef: ref, Reason: &reason}); err != nil {
		log.Fatal(err)
	}
	o := <-ended
	fmt.Println(o.AttemptID == res.Attempt.ID, o.TenantID, o.RunState, o.ErrorCode)
	stopListening()
	fmt.Println("Listen:", <-listened)
	// Output:
	// true acme canceled CANCELED
	// Listen: context canceled
}
