package kfsdbtest_test

// kfsdb's runnable examples of repo, worker and pgsource. They live in the
// kit's module because they need a real database, which the root module
// cannot require (it would put testcontainers in every importer's graph);
// go test runs them here against the kit's database, and repo's package
// documentation points to them.

import (
	"context"
	"errors"
	"fmt"
	"log"
	"log/slog"
	"slices"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/knowledgefs/kfsdb/kfsdbtest"
	"github.com/knowledgefs/kfsdb/kfstype"
	"github.com/knowledgefs/kfsdb/pgsource"
	"github.com/knowledgefs/kfsdb/repo"
	"github.com/knowledgefs/kfsdb/worker"
)

// exampleDB gives an example a migrated database of its own holding what
// the platform would: tenant acme's space, version 1 of a document in it
// and a candidate publication.
func exampleDB() (*kfsdbtest.DB, kfsdbtest.Document) {
	ctx := context.Background()
	db, err := kfsdbtest.CreateDB(ctx)
	if err != nil {
		log.Fatal(err)
	}
	doc, err := kfsdbtest.InsertDocument(ctx, db.Pool, "acme")
	if err != nil {
		log.Fatal(err)
	}
	return db, doc
}

// startParams are the Start parameters for asset version a, on the head
// revision head.
func startParams(a kfsdbtest.Asset, head int32) *repo.StartParams {
	return &repo.StartParams{
		TenantID: a.Space.TenantID, KnowledgeSpaceID: a.Space.ID,
		DocumentAssetID: a.ID, DocumentVersion: a.Version,
		PublicationGenerationID: uuid.New(), BaseHeadRevision: head,
	}
}

// Start a compilation of a document version (repo.Repo.Start): read the
// space's publication head revision the attempt compiles against, then
// Start. A stale revision (the platform promoted a publication since it was
// read) is refused with *repo.HeadConflictError. The attempt waits in
// dispatch_pending with its outbox row pending, due at once for a worker.
// Starting the same version again returns the live attempt instead of a
// second one.
func Example_start() {
	ctx := context.Background()
	db, doc := exampleDB()
	defer db.Drop(ctx)
	pool := db.Pool

	r := repo.New(nil)
	head, err := r.HeadRevision(ctx, pool, &repo.HeadRevisionParams{TenantID: doc.Space.TenantID, KnowledgeSpaceID: doc.Space.ID})
	if err != nil {
		log.Fatal(err)
	}
	_, err = r.Start(ctx, pool, startParams(doc.Asset, head+1))
	var conflict *repo.HeadConflictError
	if errors.As(err, &conflict) {
		fmt.Println("stale: expected", conflict.Expected, "actual", conflict.Actual)
	}

	res, err := r.Start(ctx, pool, startParams(doc.Asset, head))
	if err != nil {
		log.Fatal(err)
	}
	a, outbox, err := r.GetAttemptWithOutbox(ctx, pool, &repo.GetAttemptWithOutboxParams{TenantID: "acme", AttemptID: res.Attempt.ID})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("created:", res.Created, a.RunState, a.Checkpoint, "outbox:", outbox.Status)

	again, err := r.Start(ctx, pool, startParams(doc.Asset, head))
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("created:", again.Created, "same attempt:", again.Attempt.ID == res.Attempt.ID)
	// Output:
	// stale: expected 1 actual 0
	// created: true dispatch_pending queued outbox: pending
	// created: false same attempt: true
}

// Start in the caller's transaction (the outbox pattern): the platform's
// row for a new document version and the attempt with its outbox row commit
// together, or not at all. A Start in your transaction wakes idle workers
// at your commit.
func Example_startInTransaction() {
	ctx := context.Background()
	db, doc := exampleDB()
	defer db.Drop(ctx)
	pool := db.Pool
	r := repo.New(nil)

	upload := func(version int32, failAfterStart bool) error {
		return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			asset, err := kfsdbtest.InsertAsset(ctx, tx, doc.Space, version) // the platform's row
			if err != nil {
				return err
			}
			head, err := r.HeadRevision(ctx, tx, &repo.HeadRevisionParams{TenantID: asset.Space.TenantID, KnowledgeSpaceID: asset.Space.ID})
			if err != nil {
				return err
			}
			if _, err := r.Start(ctx, tx, startParams(asset, head)); err != nil {
				return err
			}
			if failAfterStart {
				return errors.New("the upload failed after the Start")
			}
			return nil
		})
	}
	fmt.Println("version 2:", upload(2, false))
	fmt.Println("version 3:", upload(3, true))

	var attempts, assets int
	if err := pool.QueryRow(ctx, `SELECT (SELECT count(*) FROM document_compilation_attempts),
		(SELECT count(*) FROM document_assets)`).Scan(&attempts, &assets); err != nil {
		log.Fatal(err)
	}
	fmt.Println("attempts:", attempts, "assets:", assets)
	// Output:
	// version 2: <nil>
	// version 3: the upload failed after the Start
	// attempts: 1 assets: 2
}

// Run a worker on direct delivery (pgsource: PostgreSQL is the queue; no
// relay, no broker). The handler records its checkpoints (here in one go
// with CompleteThrough, binding the candidate publication it built) and
// returns nil; the worker completes the attempt. A plain error from the
// handler fails the attempt, worker.Retryable retries it (see
// worker.Config.RetryPlainErrors). Canceling Run's context stops the
// worker after recording what its handlers returned.
func Example_workerPgsource() {
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
	h := worker.HandlerFunc(func(ctx context.Context, job *worker.Job) error {
		// … parse, outline, generate, build the projection set, smoke-test …
		job.CompleteThrough(doc.Candidate.ID, doc.Candidate.Fingerprint)
		return nil
	})
	w, err := worker.New(pool, src, h, &worker.Config{Concurrency: 4, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		log.Fatal(err)
	}
	runCtx, stop := context.WithCancel(ctx)
	stopped := make(chan error, 1)
	go func() { stopped <- w.Run(runCtx) }()

	a := waitEnded(ctx, r, db, res.Attempt)
	stop()
	fmt.Println("Run:", <-stopped)
	fmt.Println(a.RunState, a.Checkpoint, "candidate bound:", *a.CandidatePublicationID == doc.Candidate.ID)
	// Output:
	// Run: context canceled
	// succeeded published candidate bound: true
}

// waitEnded reads the attempt until it has ended (at most a minute).
func waitEnded(ctx context.Context, r *repo.Repo, db *kfsdbtest.DB, started *kfstype.Attempt) *kfstype.Attempt {
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(10 * time.Millisecond) {
		a, err := r.GetAttempt(ctx, db.Pool, &repo.GetAttemptParams{TenantID: started.TenantID, AttemptID: started.ID})
		if err != nil {
			log.Fatal(err)
		}
		if a.RunState.Terminal() || time.Now().After(deadline) {
			return a
		}
	}
}

// Serve chosen tenants: a worker whose source has Config.Tenants serves
// only those (dedicated capacity for a large tenant), one with
// Config.ExcludeTenants every tenant but those (a fleet for the rest).
// Both fetch with the same fairness among their tenants and the same caps
// (repo.SetTenantLimit holds across every source), and neither ever
// leases the other's attempts.
func Example_workerPgsourceTenantLists() {
	ctx := context.Background()
	db, acme := exampleDB()
	defer db.Drop(ctx)
	pool := db.Pool
	globex, err := kfsdbtest.InsertDocument(ctx, pool, "globex")
	if err != nil {
		log.Fatal(err)
	}
	r := repo.New(nil)
	var started []*kfstype.Attempt
	for _, doc := range []kfsdbtest.Document{acme, globex} {
		res, err := r.Start(ctx, pool, startParams(doc.Asset, 0))
		if err != nil {
			log.Fatal(err)
		}
		started = append(started, res.Attempt)
	}
	quiet := slog.New(slog.DiscardHandler)
	runCtx, stop := context.WithCancel(ctx)
	stopped := make(chan error, 2)
	ran := make(chan string, 2)
	for _, cfg := range []struct {
		name string
		src  pgsource.Config
	}{
		{"dedicated", pgsource.Config{Tenants: []string{"acme"}, Logger: quiet}},
		{"fleet", pgsource.Config{ExcludeTenants: []string{"acme"}, Logger: quiet}},
	} {
		src, err := pgsource.New(pool, &cfg.src)
		if err != nil {
			log.Fatal(err)
		}
		h := worker.HandlerFunc(func(ctx context.Context, job *worker.Job) error {
			ran <- cfg.name + " ran " + job.Attempt.TenantID
			c := acme.Candidate
			if job.Attempt.TenantID == "globex" {
				c = globex.Candidate
			}
			job.CompleteThrough(c.ID, c.Fingerprint)
			return nil
		})
		w, err := worker.New(pool, src, h, &worker.Config{Concurrency: 2, Logger: quiet})
		if err != nil {
			log.Fatal(err)
		}
		go func() { stopped <- w.Run(runCtx) }()
	}
	for _, a := range started {
		waitEnded(ctx, r, db, a)
	}
	stop()
	<-stopped
	<-stopped
	lines := []string{<-ran, <-ran}
	slices.Sort(lines)
	fmt.Println(strings.Join(lines, "\n"))
	// Output:
	// dedicated ran acme
	// fleet ran globex
}

// Cancel a live attempt (repo.Repo.Cancel): it ends canceled with its
// outbox row, whatever state it was in; a worker running it loses its
// lease. ExpectedRowVersion makes the call conditional on the row not
// having moved on since it was read.
func Example_cancel() {
	ctx := context.Background()
	db, doc := exampleDB()
	defer db.Drop(ctx)
	pool := db.Pool
	r := repo.New(nil)
	res, err := r.Start(ctx, pool, startParams(doc.Asset, 0))
	if err != nil {
		log.Fatal(err)
	}

	ref := repo.AttemptRef{TenantID: "acme", KnowledgeSpaceID: doc.Space.ID, AttemptID: res.Attempt.ID,
		ExpectedRowVersion: &res.Attempt.RowVersion}
	reason := "document deleted"
	a, err := r.Cancel(ctx, pool, &repo.CancelParams{AttemptRef: ref, Reason: &reason})
	if err != nil {
		log.Fatal(err)
	}
	_, outbox, err := r.GetAttemptWithOutbox(ctx, pool, &repo.GetAttemptWithOutboxParams{TenantID: "acme", AttemptID: a.ID})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(a.RunState, *a.LastErrorCode, *a.LastErrorMessage, "outbox:", outbox.Status)

	_, err = r.Cancel(ctx, pool, &repo.CancelParams{AttemptRef: ref})
	fmt.Println("again, same row version:", errors.Is(err, repo.ErrStaleRowVersion))
	ref.ExpectedRowVersion = nil
	_, err = r.Cancel(ctx, pool, &repo.CancelParams{AttemptRef: ref})
	fmt.Println("again:", errors.Is(err, repo.ErrInvalidTransition))
	// Output:
	// canceled CANCELED document deleted outbox: canceled
	// again, same row version: true
	// again: true
}

// Retry a failed attempt by hand (repo.Repo.RetryFailed): the failed
// attempt is live again, due at once, with its execution attempts
// counted afresh. Here a handler fails it with worker.Fatal, an operator
// fixes the cause and retries it, and the next run succeeds.
func Example_retryFailed() {
	ctx := context.Background()
	db, doc := exampleDB()
	defer db.Drop(ctx)
	pool := db.Pool
	r := repo.New(nil)
	res, err := r.Start(ctx, pool, startParams(doc.Asset, 0))
	if err != nil {
		log.Fatal(err)
	}

	quiet := &worker.Config{Logger: slog.New(slog.DiscardHandler)}
	encrypted := worker.HandlerFunc(func(context.Context, *worker.Job) error {
		return worker.Fatal("PDF_ENCRYPTED", errors.New("the document is password-protected"))
	})
	run, err := kfsdbtest.WorkNext(ctx, pool, encrypted, quiet)
	if err != nil {
		log.Fatal(err)
	}
	a, err := r.GetAttempt(ctx, pool, &repo.GetAttemptParams{TenantID: "acme", AttemptID: res.Attempt.ID})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(run.Outcome, a.RunState, *a.LastErrorCode)

	a, err = r.RetryFailed(ctx, pool, &repo.RetryFailedParams{AttemptRef: repo.AttemptRef{TenantID: "acme", KnowledgeSpaceID: doc.Space.ID, AttemptID: a.ID}})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(a.RunState, a.Checkpoint)

	compiles := worker.HandlerFunc(func(_ context.Context, job *worker.Job) error {
		job.CompleteThrough(doc.Candidate.ID, doc.Candidate.Fingerprint)
		return nil
	})
	if run, err = kfsdbtest.WorkNext(ctx, pool, compiles, quiet); err != nil {
		log.Fatal(err)
	}
	a, err = r.GetAttempt(ctx, pool, &repo.GetAttemptParams{TenantID: "acme", AttemptID: res.Attempt.ID})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(run.Outcome, a.RunState, a.Checkpoint)
	// Output:
	// failed failed PDF_ENCRYPTED
	// dispatch_pending queued
	// completed succeeded published
}

// exampleClock is a clock an example moves by hand (repo.Config.Clock),
// so that what a rate limit lets through does not depend on how fast the
// example runs.
type exampleClock struct{ now time.Time }

func (c *exampleClock) NowOrNil() *time.Time { t := c.now; return &t }

// Limit a tenant's rate of leases and pause it (repo.Repo.SetTenantRate,
// PauseTenant, ResumeTenant). The limits hold in every process's fetch
// (FetchLeases, so pgsource): a token bucket of Burst leases, refilled at
// Rate per second by the database clock, and a pause under which the
// tenant gets no lease while its attempts stay as they are. `kfsdb tenant
// set-limit|pause|resume` do the same from the command line.
func Example_tenantRateAndPause() {
	ctx := context.Background()
	db, doc := exampleDB()
	defer db.Drop(ctx)
	pool := db.Pool
	clock := &exampleClock{now: time.Now().UTC().Truncate(time.Second)}
	r := repo.New(&repo.Config{Clock: clock})
	asset := doc.Asset
	for v := int32(1); v <= 4; v++ {
		if v > 1 {
			var err error
			if asset, err = kfsdbtest.InsertAsset(ctx, pool, doc.Space, 1); err != nil {
				log.Fatal(err)
			}
		}
		if _, err := r.Start(ctx, pool, startParams(asset, 0)); err != nil {
			log.Fatal(err)
		}
	}
	fetch := func() int {
		res, err := r.FetchLeases(ctx, pool, &repo.FetchLeasesParams{WorkerID: "worker-1", BatchSize: 10})
		if err != nil {
			log.Fatal(err)
		}
		return len(res.Leased)
	}

	if err := r.SetTenantRate(ctx, pool, &repo.SetTenantRateParams{TenantID: "acme", Rate: 1, Burst: 2}); err != nil {
		log.Fatal(err)
	}
	fmt.Println("leased at once:", fetch())
	fmt.Println("right after:", fetch())
	clock.now = clock.now.Add(time.Second)
	fmt.Println("a second later:", fetch())

	reason := "invoice overdue"
	if _, err := r.PauseTenant(ctx, pool, &repo.PauseTenantParams{TenantID: "acme", Reason: &reason}); err != nil {
		log.Fatal(err)
	}
	clock.now = clock.now.Add(10 * time.Second)
	fmt.Println("paused, ten seconds later:", fetch())
	limit, err := r.GetTenantLimit(ctx, pool, &repo.GetTenantLimitParams{TenantID: "acme"})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("%v leases/s, burst %d, %v tokens, paused %v (%s)\n", limit.Rate, limit.Burst, limit.Tokens, limit.Paused(), limit.PauseReason)
	if err := r.ResumeTenant(ctx, pool, &repo.ResumeTenantParams{TenantID: "acme"}); err != nil {
		log.Fatal(err)
	}
	fmt.Println("resumed:", fetch())
	// Output:
	// leased at once: 2
	// right after: 0
	// a second later: 1
	// paused, ten seconds later: 0
	// 1 leases/s, burst 2, 2 tokens, paused true (invoice overdue)
	// resumed: 1
}

// List a tenant's attempts that failed with one error code in the last
// hour (repo.Repo.ListAttempts with LastErrorCode and NewerThan), as the
// console's and `kfsdb attempts --all`'s bulk retry does before it retries
// each at the row version listed. The age of an ended attempt is the time
// since it ended (of a live one, since it was created), so on ended
// attempts it is a bound of the list's index scan.
func Example_listAttemptsByErrorCode() {
	ctx := context.Background()
	db, doc := exampleDB()
	defer db.Drop(ctx)
	pool := db.Pool
	r := repo.New(nil)
	if _, err := r.Start(ctx, pool, startParams(doc.Asset, 0)); err != nil {
		log.Fatal(err)
	}
	encrypted := worker.HandlerFunc(func(context.Context, *worker.Job) error {
		return worker.Fatal("PDF_ENCRYPTED", errors.New("the document is password-protected"))
	})
	if _, err := kfsdbtest.WorkNext(ctx, pool, encrypted, &worker.Config{Logger: slog.New(slog.DiscardHandler)}); err != nil {
		log.Fatal(err)
	}

	page, err := r.ListAttempts(ctx, pool, &repo.ListAttemptsParams{TenantID: "acme", States: []kfstype.RunState{kfstype.RunStateFailed},
		LastErrorCode: "PDF_ENCRYPTED", NewerThan: time.Hour, Limit: 100})
	if err != nil {
		log.Fatal(err)
	}
	for _, a := range page.Attempts {
		a, err = r.RetryFailed(ctx, pool, &repo.RetryFailedParams{AttemptRef: repo.AttemptRef{TenantID: a.TenantID,
			KnowledgeSpaceID: a.KnowledgeSpaceID, AttemptID: a.ID, ExpectedRowVersion: &a.RowVersion}})
		if err != nil {
			log.Fatal(err)
		}
		fmt.Println("retried:", a.RunState)
	}
	older, err := r.ListAttempts(ctx, pool, &repo.ListAttemptsParams{TenantID: "acme", States: kfstype.RunStates(),
		OlderThan: time.Hour, Limit: 100})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("older than an hour:", len(older.Attempts))
	// Output:
	// retried: dispatch_pending
	// older than an hour: 0
}
