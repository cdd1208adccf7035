package testfactory

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/knowledgefs/kfsdb/kfstype"
	"github.com/knowledgefs/kfsdb/repo"
	"github.com/knowledgefs/kfsdb/worker"
)

// Candidate is a candidate publication a handler binds at projection_built.
type Candidate struct {
	ID          uuid.UUID
	Fingerprint string
}

// Document is one document version to compile: its scope (one asset of a
// space) and the candidate publication of that space.
type Document struct {
	Scope     Scope
	Candidate Candidate
}

// SeedDocuments creates spaces knowledge spaces, each with perSpace asset
// rows and one candidate publication, and returns the document versions.
// Asset rows are inserted in one statement per space.
func SeedDocuments(ctx context.Context, t testing.TB, db DBTX, spaces, perSpace int) []Document {
	t.Helper()
	var docs []Document
	for range spaces {
		docs = append(docs, seedSpace(ctx, t, db, nil, perSpace)...)
	}
	return docs
}

// SeedTenantDocuments is SeedDocuments' one space, of tenant.
func SeedTenantDocuments(ctx context.Context, t testing.TB, db DBTX, tenant string, perSpace int) []Document {
	t.Helper()
	return seedSpace(ctx, t, db, &ScopeOpts{TenantID: &tenant}, perSpace)
}

// seedSpace creates one knowledge space (NewScope's opts) with perSpace
// asset rows and one candidate publication.
func seedSpace(ctx context.Context, t testing.TB, db DBTX, opts *ScopeOpts, perSpace int) []Document {
	t.Helper()
	s := NewScope(ctx, t, db, opts)
	id, fp := s.Publication(ctx, t, db, "candidate")
	c := Candidate{ID: id, Fingerprint: fp}
	docs := []Document{{Scope: *s, Candidate: c}}
	if perSpace > 1 {
		rows, err := db.Query(ctx, `
			INSERT INTO document_assets (id, knowledge_space_id, filename, mime_type, object_key, sha256, size_bytes, version)
			SELECT g.id, $1, 'doc.pdf', 'application/pdf', 'objects/' || g.id, encode(sha256(g.id::text::bytea), 'hex'), 1024, $2
			  FROM (SELECT gen_random_uuid() AS id FROM generate_series(1, $3::int)) g
			RETURNING id`, s.KnowledgeSpaceID, s.DocumentVersion, perSpace-1)
		require.NoError(t, err)
		for rows.Next() {
			var asset uuid.UUID
			require.NoError(t, rows.Scan(&asset))
			scope := *s
			scope.DocumentAssetID = asset
			docs = append(docs, Document{Scope: scope, Candidate: c})
		}
		require.NoError(t, rows.Err())
	}
	return docs
}

// StartAll starts one attempt per document with up to 8 concurrent Starts,
// each with maxAttempts execution attempts (0 for the default).
func StartAll(ctx context.Context, t testing.TB, r *repo.Repo, db DBTX, docs []Document, maxAttempts int32) []*kfstype.Attempt {
	t.Helper()
	return StartAllFunc(ctx, t, r, db, docs, func(int) int32 { return maxAttempts })
}

// StartAllFunc is [StartAll] with the execution attempts set per document:
// maxAttempts(i) (0 for the default) for docs[i]; a nil maxAttempts leaves
// every document at the default.
func StartAllFunc(ctx context.Context, t testing.TB, r *repo.Repo, db DBTX, docs []Document, maxAttempts func(i int) int32) []*kfstype.Attempt {
	t.Helper()
	out := make([]*kfstype.Attempt, len(docs))
	errs := make([]error, len(docs))
	var wg sync.WaitGroup
	sem := make(chan struct{}, 8)
	for i := range docs {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			p := docs[i].Scope.StartParams()
			if maxAttempts != nil {
				p.MaxExecutionAttempts = maxAttempts(i)
			}
			res, err := r.Start(ctx, db, p)
			if err == nil && !res.Created {
				err = fmt.Errorf("document %d: attempt not created", i)
			}
			if err == nil {
				out[i] = res.Attempt
			}
			errs[i] = err
		})
	}
	wg.Wait()
	require.NoError(t, errors.Join(errs...))
	return out
}

// Candidates maps spaces to their candidate publication, for handlers.
func Candidates(docs []Document) map[uuid.UUID]Candidate {
	m := make(map[uuid.UUID]Candidate, len(docs))
	for _, d := range docs {
		m[d.Scope.KnowledgeSpaceID] = d.Candidate
	}
	return m
}

// CompileJob walks a leased attempt from its checkpoint to
// smoke_eval_passed, binding c at projection_built (unless bound), and
// calls between (may be nil) before each step.
func CompileJob(ctx context.Context, job *worker.Job, c Candidate, between func(context.Context) error) error {
	return CompileUntil(ctx, job, c, kfstype.CheckpointSmokeEvalPassed, between)
}

// CompileUntil is [CompileJob] stopping at checkpoint last.
func CompileUntil(ctx context.Context, job *worker.Job, c Candidate, last kfstype.Checkpoint, between func(context.Context) error) error {
	cps := kfstype.Checkpoints()
	for i := job.Attempt.Checkpoint.Rank() + 1; i <= last.Rank(); i++ {
		if between != nil {
			if err := between(ctx); err != nil {
				return err
			}
		}
		cp := cps[i]
		var err error
		if cp == kfstype.CheckpointProjectionBuilt && job.Attempt.CandidatePublicationID == nil {
			err = job.BindCandidate(ctx, cp, c.ID, c.Fingerprint)
		} else {
			err = job.Advance(ctx, cp)
		}
		if err != nil {
			return err
		}
	}
	return nil
}
