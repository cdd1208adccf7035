// Command quickstart migrates the database at DATABASE_URL, starts one
// compilation and runs a worker until it has recorded the outcome.
package main

import (
	"context"
	"errors"
	"fmt"
	"log"
	"os"
	"os/signal"
	"strings"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/knowledgefs/kfsdb/migrate"
	"github.com/knowledgefs/kfsdb/pgsource"
	"github.com/knowledgefs/kfsdb/repo"
	"github.com/knowledgefs/kfsdb/worker"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := run(ctx, os.Getenv("DATABASE_URL")); err != nil {
		log.Fatal(err)
	}
}

func run(ctx context.Context, databaseURL string) error {
	// 1. kfsdb's migrations (`kfsdb migrate up` in a deploy does the same).
	if _, err := migrate.Up(ctx, databaseURL); err != nil {
		return err
	}
	pool, err := pgxpool.New(ctx, databaseURL)
	if err != nil {
		return err
	}
	defer pool.Close()

	// 2. The platform's rows: a tenant's space, a document version in it and
	// the candidate publication your compiler produces. On the platform's
	// database they exist already; a standalone database needs them here,
	// new ones on each run (a space's slug is unique within its tenant).
	tenant, space, asset, candidate := "acme", uuid.New(), uuid.New(), uuid.New()
	slug := "handbook-" + space.String()
	fingerprint := "projection-set-sha256:" + strings.Repeat("0", 64)
	if _, err := pool.Exec(ctx, `
		WITH s AS (INSERT INTO knowledge_spaces (id, tenant_id, slug, name) VALUES ($2, $1, $6, 'Handbook')),
		     a AS (INSERT INTO document_assets (id, knowledge_space_id, filename, mime_type, object_key, sha256, size_bytes, version)
		           VALUES ($3, $2, 'handbook.pdf', 'application/pdf', 'objects/handbook', repeat('0', 64), 1024, 1))
		INSERT INTO projection_set_publications (id, tenant_id, knowledge_space_id, fingerprint, projection_version, status)
		VALUES ($4, $1, $2, $5, 1, 'candidate')`, tenant, space, asset, candidate, fingerprint, slug); err != nil {
		return err
	}

	// 3. Start one compilation against the space's current head revision.
	r := repo.New(nil)
	head, err := r.HeadRevision(ctx, pool, &repo.HeadRevisionParams{TenantID: tenant, KnowledgeSpaceID: space})
	if err != nil {
		return err
	}
	res, err := r.Start(ctx, pool, &repo.StartParams{
		TenantID: tenant, KnowledgeSpaceID: space, DocumentAssetID: asset, DocumentVersion: 1,
		PublicationGenerationID: uuid.New(), BaseHeadRevision: head,
	})
	if err != nil {
		return err
	}

	// 4. A worker fed straight from PostgreSQL (direct delivery) runs the
	// handler. Returning nil completes the attempt; a plain error fails it;
	// worker.Retryable(err) retries it after a backoff.
	ran := make(chan struct{}, 1)
	handler := worker.HandlerFunc(func(ctx context.Context, job *worker.Job) error {
		// … compile job.Attempt's document version into the candidate …
		job.CompleteThrough(candidate, fingerprint) // bind it; the worker completes
		select {
		case ran <- struct{}{}:
		default:
		}
		return nil
	})
	src, err := pgsource.New(pool, nil)
	if err != nil {
		return err
	}
	w, err := worker.New(pool, src, handler, nil)
	if err != nil {
		return err
	}
	workCtx, stopWork := context.WithCancel(ctx)
	stopped := make(chan error, 1)
	go func() { stopped <- w.Run(workCtx) }()

	// 5. Shut down (a service would on SIGTERM): Run returns once what its
	// handlers returned is recorded.
	select {
	case <-ran:
	case <-ctx.Done():
	}
	stopWork()
	if err := <-stopped; !errors.Is(err, context.Canceled) {
		return err
	}
	a, err := r.GetAttempt(context.WithoutCancel(ctx), pool, &repo.GetAttemptParams{TenantID: tenant, AttemptID: res.Attempt.ID})
	if err != nil {
		return err
	}
	fmt.Println("attempt", a.ID, a.RunState, a.Checkpoint)
	// 6. The platform now promotes the candidate and bumps the space's head.
	return nil
}
