package kfsdbtest

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"testing"

	"github.com/google/uuid"

	"github.com/knowledgefs/kfsdb/kfstype"
	"github.com/knowledgefs/kfsdb/repo"
)

// The platform's rows. kfsdb owns the attempts and their outbox rows; the
// knowledge spaces, document assets, projection set publications and
// publication heads are the platform's, created by its own code and
// migrations, and kfsdb only reads them (a Start checks the space, the
// asset version and the head revision; Advance at projection_built checks
// the candidate). The fixtures below insert the few columns those checks
// read, as the platform would, for tests; they are not an API for
// production.

// Space is a knowledge space (knowledge_spaces): a tenant's container of
// documents. Every attempt belongs to one, under the same tenant.
type Space struct {
	TenantID string
	ID       uuid.UUID
}

// Asset is one uploaded version of a document (document_assets: the row's
// id is the version's). An attempt compiles one asset version.
type Asset struct {
	Space   Space
	ID      uuid.UUID
	Version int32
}

// Publication is a projection set publication (projection_set_publications)
// of a space: a compiled projection set. A handler builds one with status
// candidate and binds it at projection_built; after Complete the platform
// promotes it (status published) and bumps the space's publication head.
type Publication struct {
	ID          uuid.UUID
	Fingerprint string
}

// Document is what one attempt needs: a space, an asset version in it and
// a candidate publication the handler can bind.
type Document struct {
	Space     Space
	Asset     Asset
	Candidate Publication
}

// InsertSpace inserts a knowledge space of tenantID ("" for a random
// tenant-xxxxxxxx).
func InsertSpace(ctx context.Context, db repo.DBTX, tenantID string) (Space, error) {
	if tenantID == "" {
		tenantID = "tenant-" + uuid.NewString()[:8]
	}
	s := Space{TenantID: tenantID, ID: uuid.New()}
	_, err := db.Exec(ctx, `INSERT INTO knowledge_spaces (id, tenant_id, slug, name) VALUES ($1, $2, $3, 'Space')`,
		s.ID, s.TenantID, "space-"+s.ID.String()[:8])
	if err != nil {
		return Space{}, fmt.Errorf("kfsdbtest: insert knowledge space: %w", err)
	}
	return s, nil
}

// InsertAsset inserts version (> 0) of a new document in space s.
func InsertAsset(ctx context.Context, db repo.DBTX, s Space, version int32) (Asset, error) {
	a := Asset{Space: s, ID: uuid.New(), Version: version}
	_, err := db.Exec(ctx, `INSERT INTO document_assets
		(id, knowledge_space_id, filename, mime_type, object_key, sha256, size_bytes, version)
		VALUES ($1, $2, 'document.pdf', 'application/pdf', $3, $4, 1024, $5)`,
		a.ID, s.ID, "objects/"+a.ID.String(), hexSHA256(a.ID.String()), version)
	if err != nil {
		return Asset{}, fmt.Errorf("kfsdbtest: insert document asset: %w", err)
	}
	return a, nil
}

// InsertCandidate inserts a candidate publication in space s, with a
// well-formed fingerprint (projection-set-sha256: and 64 hex digits).
func InsertCandidate(ctx context.Context, db repo.DBTX, s Space) (Publication, error) {
	p := Publication{ID: uuid.New()}
	p.Fingerprint = Fingerprint(p.ID.String())
	_, err := db.Exec(ctx, `INSERT INTO projection_set_publications
		(id, tenant_id, knowledge_space_id, fingerprint, projection_version, status)
		VALUES ($1, $2, $3, $4, 1, 'candidate')`, p.ID, s.TenantID, s.ID, p.Fingerprint)
	if err != nil {
		return Publication{}, fmt.Errorf("kfsdbtest: insert candidate publication: %w", err)
	}
	return p, nil
}

// InsertDocument inserts a space of tenantID ("" for a random tenant),
// version 1 of a document in it and a candidate publication.
func InsertDocument(ctx context.Context, db repo.DBTX, tenantID string) (Document, error) {
	s, err := InsertSpace(ctx, db, tenantID)
	if err != nil {
		return Document{}, err
	}
	a, err := InsertAsset(ctx, db, s, 1)
	if err != nil {
		return Document{}, err
	}
	c, err := InsertCandidate(ctx, db, s)
	if err != nil {
		return Document{}, err
	}
	return Document{Space: s, Asset: a, Candidate: c}, nil
}

// Promote does what the platform does after an attempt's Complete: it
// makes publication p of space s the published one and moves the space's
// publication head to it, one revision up (revision 1 for a space without
// a head), in one statement, and returns the new head revision. Attempts
// started from the old revision are refused from then on
// (*repo.HeadConflictError). The platform's own promotion may check more
// (validation, the previous publication's status); the kit sets only what
// kfsdb reads.
func Promote(ctx context.Context, db repo.DBTX, s Space, p Publication) (int32, error) {
	var rev int32
	err := db.QueryRow(ctx, `
		WITH published AS (
		  UPDATE projection_set_publications SET status = 'published', updated_at = now()
		   WHERE id = $3 AND tenant_id = $1 AND knowledge_space_id = $2
		   RETURNING id
		)
		INSERT INTO projection_set_publication_heads AS h (tenant_id, knowledge_space_id, publication_id, head_revision)
		SELECT $1, $2, published.id, 1 FROM published
		ON CONFLICT (tenant_id, knowledge_space_id)
		DO UPDATE SET publication_id = EXCLUDED.publication_id, head_revision = h.head_revision + 1, updated_at = now()
		RETURNING h.head_revision`, s.TenantID, s.ID, p.ID).Scan(&rev)
	if err != nil {
		return 0, fmt.Errorf("kfsdbtest: promote publication %s of space %s: %w", p.ID, s.ID, err)
	}
	return rev, nil
}

// Fingerprint returns a well-formed publication fingerprint derived from
// seed.
func Fingerprint(seed string) string {
	return "projection-set-sha256:" + hexSHA256(seed)
}

func hexSHA256(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:])
}

// Space inserts a knowledge space of tenantID ("" for a random tenant).
func (db *DB) Space(t testing.TB, tenantID string) Space {
	t.Helper()
	s, err := InsertSpace(context.Background(), db.Pool, tenantID)
	must(t, err)
	return s
}

// Asset inserts version of a new document in space s.
func (db *DB) Asset(t testing.TB, s Space, version int32) Asset {
	t.Helper()
	a, err := InsertAsset(context.Background(), db.Pool, s, version)
	must(t, err)
	return a
}

// Candidate inserts a candidate publication in space s.
func (db *DB) Candidate(t testing.TB, s Space) Publication {
	t.Helper()
	p, err := InsertCandidate(context.Background(), db.Pool, s)
	must(t, err)
	return p
}

// Document inserts a space of tenantID ("" for a random tenant), version 1
// of a document in it and a candidate publication.
func (db *DB) Document(t testing.TB, tenantID string) Document {
	t.Helper()
	d, err := InsertDocument(context.Background(), db.Pool, tenantID)
	must(t, err)
	return d
}

// Promote promotes publication p and bumps space s's head (see [Promote])
// and returns the new head revision.
func (db *DB) Promote(t testing.TB, s Space, p Publication) int32 {
	t.Helper()
	rev, err := Promote(context.Background(), db.Pool, s, p)
	must(t, err)
	return rev
}

// StartParams returns Start parameters for asset version a: its tenant,
// space and version, a new publication generation id and the space's
// current head revision, read with repo.HeadRevision as an application
// would.
func (db *DB) StartParams(t testing.TB, a Asset) *repo.StartParams {
	t.Helper()
	rev, err := db.Repo.HeadRevision(context.Background(), db.Pool, &repo.HeadRevisionParams{TenantID: a.Space.TenantID, KnowledgeSpaceID: a.Space.ID})
	must(t, err)
	return &repo.StartParams{
		TenantID: a.Space.TenantID, KnowledgeSpaceID: a.Space.ID, DocumentAssetID: a.ID,
		DocumentVersion: a.Version, PublicationGenerationID: uuid.New(), BaseHeadRevision: rev,
	}
}

// Start starts an attempt with p (see [DB.StartParams]) and fails the test
// unless a new attempt was created.
func (db *DB) Start(t testing.TB, p *repo.StartParams) *kfstype.Attempt {
	t.Helper()
	res, err := db.Repo.Start(context.Background(), db.Pool, p)
	must(t, err)
	if !res.Created {
		t.Fatalf("kfsdbtest: Start returned the live attempt %s (%s) instead of creating one", res.Attempt.ID, res.Attempt.RunState)
	}
	return res.Attempt
}

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
