package repo_test

import (
	"context"
	"errors"
	"log"
	"os"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/knowledgefs/kfsdb/kfstype"
	"github.com/knowledgefs/kfsdb/repo"
)

// Starting a compilation inside your own transaction (the outbox pattern):
// the document asset row and the attempt with its outbox row commit
// together or not at all. (Runs against DATABASE_URL; the integration
// tests in tests/repo do the same against a container.)
func ExampleRepo_Start_inYourTransaction() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, os.Getenv("DATABASE_URL"))
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()
	r := repo.New(nil)

	tenant, space, asset := "acme", uuid.MustParse("0190a5f6-0000-7000-8000-000000000001"), uuid.New()
	err = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `INSERT INTO document_assets
			(id, knowledge_space_id, filename, mime_type, object_key, sha256, size_bytes, version)
			VALUES ($1, $2, 'handbook.pdf', 'application/pdf', 'objects/handbook', repeat('0', 64), 1024, 1)`,
			asset, space); err != nil {
			return err
		}
		res, err := r.Start(ctx, tx, &repo.StartParams{
			TenantID: tenant, KnowledgeSpaceID: space, DocumentAssetID: asset,
			DocumentVersion: 1, PublicationGenerationID: uuid.New(),
		})
		if err != nil {
			return err
		}
		log.Printf("attempt %s created=%t", res.Attempt.ID, res.Created)
		return nil
	})
	var conflict *repo.HeadConflictError
	switch {
	case errors.As(err, &conflict):
		log.Printf("rebase on head revision %d", conflict.Actual)
	case err != nil:
		log.Fatal(err)
	}
}

// The worker path by hand: take the lease for a delivery, heartbeat,
// advance through the checkpoints (binding the candidate publication at
// projection_built) and complete. Package worker runs this loop for you.
func ExampleRepo_AcquireLease_workerPath() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, os.Getenv("DATABASE_URL"))
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()
	r := repo.New(nil)

	delivery := repo.Delivery{AttemptID: uuid.MustParse(os.Getenv("ATTEMPT_ID")), QueueJobID: os.Getenv("QUEUE_JOB_ID")}
	attempt, lease, err := r.AcquireLease(ctx, pool, &repo.AcquireLeaseParams{Delivery: delivery, WorkerID: "worker-1"})
	switch {
	case errors.Is(err, repo.ErrDeliveryMismatch), errors.Is(err, repo.ErrInvalidTransition):
		return // stale or duplicate delivery: acknowledge it and move on
	case errors.Is(err, repo.ErrAttemptsExhausted):
		_, err = r.FailExhausted(ctx, pool, &delivery)
		if err != nil {
			log.Print(err)
		}
		return
	case err != nil:
		log.Fatal(err)
	}

	if lease, err = r.Heartbeat(ctx, pool, &repo.HeartbeatParams{Lease: lease}); err != nil {
		log.Fatal(err) // ErrLeaseLost: stop working at once
	}
	publication, fingerprint := uuid.New(), "projection-set-sha256:"+
		"0000000000000000000000000000000000000000000000000000000000000000"
	for _, cp := range kfstype.Checkpoints()[attempt.Checkpoint.Rank()+1 : kfstype.CheckpointPublished.Rank()] {
		p := &repo.AdvanceParams{Lease: lease, Checkpoint: cp}
		if cp == kfstype.CheckpointProjectionBuilt {
			p.CandidatePublicationID, p.CandidateFingerprint = &publication, &fingerprint
		}
		if attempt, err = r.Advance(ctx, pool, p); err != nil {
			log.Fatal(err)
		}
	}
	if attempt, err = r.Complete(ctx, pool, lease); err != nil {
		log.Fatal(err)
	}
	log.Printf("attempt %s is %s at %s", attempt.ID, attempt.RunState, attempt.Checkpoint)
}
