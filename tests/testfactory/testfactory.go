// Package testfactory builds the rows kfsdb's integration tests need
// (spaces, document assets, publications, heads, attempts in any state),
// a manual clock, and the shared invariant check every test runs after
// every transition.
package testfactory

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/knowledgefs/kfsdb/repo"
)

// DBTX is what the factory writes through.
type DBTX = repo.DBTX

// Scope is a tenant's space with one document asset version.
type Scope struct {
	TenantID         string
	KnowledgeSpaceID uuid.UUID
	DocumentAssetID  uuid.UUID
	DocumentVersion  int32
}

// ScopeOpts tunes Scope; every field is optional.
type ScopeOpts struct {
	TenantID        *string
	DocumentVersion *int32
}

// NewScope inserts a knowledge space and a document asset version.
func NewScope(ctx context.Context, t testing.TB, db DBTX, opts *ScopeOpts) *Scope {
	t.Helper()
	if opts == nil {
		opts = &ScopeOpts{}
	}
	s := &Scope{
		TenantID:         "tenant-" + uuid.NewString()[:8],
		KnowledgeSpaceID: uuid.New(),
		DocumentAssetID:  uuid.New(),
		DocumentVersion:  1,
	}
	if opts.TenantID != nil {
		s.TenantID = *opts.TenantID
	}
	if opts.DocumentVersion != nil {
		s.DocumentVersion = *opts.DocumentVersion
	}
	_, err := db.Exec(ctx, `INSERT INTO knowledge_spaces (id, tenant_id, slug, name) VALUES ($1, $2, $3, $4)`,
		s.KnowledgeSpaceID, s.TenantID, "space-"+s.KnowledgeSpaceID.String()[:8], "Space")
	require.NoError(t, err)
	// document_assets.id is the primary key, so each version is its own
	// asset row; a scope holds one.
	_, err = db.Exec(ctx, `INSERT INTO document_assets
		(id, knowledge_space_id, filename, mime_type, object_key, sha256, size_bytes, version)
		VALUES ($1, $2, 'doc.pdf', 'application/pdf', $3, $4, 1024, $5)`,
		s.DocumentAssetID, s.KnowledgeSpaceID, "objects/"+s.DocumentAssetID.String(), sha(s.DocumentAssetID.String()), s.DocumentVersion)
	require.NoError(t, err)
	return s
}

func sha(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:])
}

// Fingerprint returns a well-formed candidate fingerprint derived from seed.
func Fingerprint(seed string) string {
	return "projection-set-sha256:" + sha(seed)
}

// Publication inserts a projection set publication in the scope's space
// with the given status and returns its id and fingerprint.
func (s *Scope) Publication(ctx context.Context, t testing.TB, db DBTX, status string) (uuid.UUID, string) {
	t.Helper()
	id := uuid.New()
	fp := Fingerprint(id.String())
	_, err := db.Exec(ctx, `INSERT INTO projection_set_publications
		(id, tenant_id, knowledge_space_id, fingerprint, projection_version, status)
		VALUES ($1, $2, $3, $4, 1, $5)`, id, s.TenantID, s.KnowledgeSpaceID, fp, status)
	require.NoError(t, err)
	return id, fp
}

// SetHead points the space's publication head at a new published
// publication with the given revision.
func (s *Scope) SetHead(ctx context.Context, t testing.TB, db DBTX, revision int32) {
	t.Helper()
	pub, _ := s.Publication(ctx, t, db, "published")
	_, err := db.Exec(ctx, `INSERT INTO projection_set_publication_heads
		(tenant_id, knowledge_space_id, publication_id, head_revision) VALUES ($1, $2, $3, $4)
		ON CONFLICT (tenant_id, knowledge_space_id) DO UPDATE SET publication_id = EXCLUDED.publication_id, head_revision = EXCLUDED.head_revision`,
		s.TenantID, s.KnowledgeSpaceID, pub, revision)
	require.NoError(t, err)
}

// StartParams returns Start parameters for the scope's document version.
func (s *Scope) StartParams() *repo.StartParams {
	return &repo.StartParams{
		TenantID:                s.TenantID,
		KnowledgeSpaceID:        s.KnowledgeSpaceID,
		DocumentAssetID:         s.DocumentAssetID,
		DocumentVersion:         s.DocumentVersion,
		PublicationGenerationID: uuid.New(),
	}
}

// Ref returns the control-plane reference of an attempt in the scope.
func (s *Scope) Ref(attemptID uuid.UUID) repo.AttemptRef {
	return repo.AttemptRef{TenantID: s.TenantID, KnowledgeSpaceID: s.KnowledgeSpaceID, AttemptID: attemptID}
}
