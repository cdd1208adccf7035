// Package testfactory builds the rows kfsdb's integration tests need
// (spaces, document assets, publications, heads, attempts in any state),
// a manual clock, and the shared invariant check every test runs after
// every transition.
package testfactory

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/knowledgefs/kfsdb/kfstype"
	"github.com/knowledgefs/kfsdb/repo"
)

// Clock is a manual repo.Clock: every statement sees the time it holds.
// Safe for concurrent use.
type Clock struct {
	mu  sync.Mutex
	now time.Time
}

// NewClock returns a clock at a recent, microsecond-truncated time (the
// precision PostgreSQL stores), so times round-trip exactly.
func NewClock() *Clock {
	return &Clock{now: time.Now().UTC().Truncate(time.Second).Add(-time.Hour)}
}

// ClockAt returns a clock at t: a second actor (a relay, a worker) whose
// time runs ahead of or behind a test's main clock.
func ClockAt(t time.Time) *Clock {
	return &Clock{now: t.UTC()}
}

// NowOrNil implements repo.Clock.
func (c *Clock) NowOrNil() *time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	t := c.now
	return &t
}

// Now returns the clock's time.
func (c *Clock) Now() time.Time { return *c.NowOrNil() }

// Advance moves the clock forward.
func (c *Clock) Advance(d time.Duration) time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
	return c.now
}

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

// Driver walks attempts through the state machine with a Repo.
type Driver struct {
	Repo    *repo.Repo
	DB      DBTX
	RelayID string
	Worker  string
	jobSeq  int
	mu      sync.Mutex
}

// NextJobID returns a fresh queue job id.
func (d *Driver) NextJobID() string {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.jobSeq++
	return fmt.Sprintf("job-%d-%s", d.jobSeq, uuid.NewString()[:8])
}

// Start starts an attempt for the scope and requires it was created.
func (d *Driver) Start(ctx context.Context, t testing.TB, s *Scope) *kfstype.Attempt {
	t.Helper()
	res, err := d.Repo.Start(ctx, d.DB, s.StartParams())
	require.NoError(t, err)
	require.True(t, res.Created)
	return res.Attempt
}

// Claim claims the attempt's outbox row (it must be due) and returns it.
func (d *Driver) Claim(ctx context.Context, t testing.TB, attemptID uuid.UUID) *kfstype.OutboxMessage {
	t.Helper()
	msgs, err := d.Repo.ClaimOutbox(ctx, d.DB, &repo.ClaimParams{RelayID: d.relay(), BatchSize: 100})
	require.NoError(t, err)
	for _, m := range msgs {
		if m.AttemptID == attemptID {
			return m
		}
	}
	require.FailNow(t, "outbox row not claimed", "attempt %s", attemptID)
	return nil
}

func (d *Driver) relay() string {
	if d.RelayID == "" {
		return "relay-test"
	}
	return d.RelayID
}

func (d *Driver) worker() string {
	if d.Worker == "" {
		return "worker-test"
	}
	return d.Worker
}

// Dispatch claims and marks the attempt's outbox row dispatched; it
// returns the delivery a worker would receive.
func (d *Driver) Dispatch(ctx context.Context, t testing.TB, attemptID uuid.UUID) *repo.Delivery {
	t.Helper()
	m := d.Claim(ctx, t, attemptID)
	job := d.NextJobID()
	res, err := d.Repo.MarkDispatched(ctx, d.DB, &repo.MarkDispatchedParams{Dispatches: []repo.Dispatch{{
		OutboxID: m.ID, LockToken: *m.LockToken, QueueJobID: job,
	}}})
	require.NoError(t, err)
	require.Len(t, res.Marked, 1)
	return &repo.Delivery{AttemptID: attemptID, QueueJobID: job}
}

// Running starts an attempt, dispatches it and acquires its lease.
func (d *Driver) Running(ctx context.Context, t testing.TB, s *Scope) (*kfstype.Attempt, *repo.Lease, *repo.Delivery) {
	t.Helper()
	a := d.Start(ctx, t, s)
	del := d.Dispatch(ctx, t, a.ID)
	a, lease, err := d.Repo.AcquireLease(ctx, d.DB, &repo.AcquireLeaseParams{Delivery: *del, WorkerID: d.worker()})
	require.NoError(t, err)
	return a, lease, del
}

// AdvanceTo advances a running attempt checkpoint by checkpoint to target,
// binding a fresh candidate publication at projection_built.
func (d *Driver) AdvanceTo(ctx context.Context, t testing.TB, s *Scope, lease *repo.Lease, target kfstype.Checkpoint) *kfstype.Attempt {
	t.Helper()
	var a *kfstype.Attempt
	cps := kfstype.Checkpoints()
	for i := 1; i <= target.Rank(); i++ {
		p := &repo.AdvanceParams{Lease: lease, Checkpoint: cps[i]}
		if cps[i] == kfstype.CheckpointProjectionBuilt {
			id, fp := s.Publication(ctx, t, d.DB, "candidate")
			p.CandidatePublicationID, p.CandidateFingerprint = &id, &fp
		}
		var err error
		a, err = d.Repo.Advance(ctx, d.DB, p)
		require.NoError(t, err)
	}
	return a
}

// InState starts an attempt for the scope and walks it to state (through
// Running for retry_wait, succeeded and failed; straight from
// dispatch_pending for canceled and superseded), checking the invariants
// after every step.
func (d *Driver) InState(ctx context.Context, t testing.TB, s *Scope, state kfstype.RunState) *kfstype.Attempt {
	t.Helper()
	inv := func(a *kfstype.Attempt) *kfstype.Attempt {
		t.Helper()
		RequireInvariants(ctx, t, d.DB, a.ID)
		return a
	}
	running := func() (*kfstype.Attempt, *repo.Lease) {
		t.Helper()
		a, lease, _ := d.Running(ctx, t, s)
		return inv(a), lease
	}
	switch state {
	case kfstype.RunStateDispatchPending:
		return inv(d.Start(ctx, t, s))
	case kfstype.RunStateQueued:
		a := inv(d.Start(ctx, t, s))
		d.Dispatch(ctx, t, a.ID)
		a, err := d.Repo.GetAttempt(ctx, d.DB, s.TenantID, a.ID)
		require.NoError(t, err)
		return inv(a)
	case kfstype.RunStateRunning:
		a, _ := running()
		return a
	case kfstype.RunStateRetryWait:
		_, lease := running()
		a, err := d.Repo.ScheduleRetry(ctx, d.DB, &repo.ScheduleRetryParams{
			Lease: lease, RetryDelay: 30 * time.Second,
			ErrorCode: kfstype.ErrorCodeCompilationRetryable, ErrorMessage: "transient",
		})
		require.NoError(t, err)
		return inv(a)
	case kfstype.RunStateSucceeded:
		_, lease := running()
		inv(d.AdvanceTo(ctx, t, s, lease, kfstype.CheckpointSmokeEvalPassed))
		a, err := d.Repo.Complete(ctx, d.DB, lease)
		require.NoError(t, err)
		return inv(a)
	case kfstype.RunStateFailed:
		_, lease := running()
		a, err := d.Repo.Fail(ctx, d.DB, &repo.FailParams{
			Lease: lease, ErrorCode: kfstype.ErrorCodeCompilationFailed, ErrorMessage: "broken",
		})
		require.NoError(t, err)
		return inv(a)
	case kfstype.RunStateCanceled:
		a := inv(d.Start(ctx, t, s))
		a, err := d.Repo.Cancel(ctx, d.DB, &repo.CancelParams{AttemptRef: s.Ref(a.ID)})
		require.NoError(t, err)
		return inv(a)
	case kfstype.RunStateSuperseded:
		a := inv(d.Start(ctx, t, s))
		a, err := d.Repo.Supersede(ctx, d.DB, &repo.SupersedeParams{AttemptRef: s.Ref(a.ID)})
		require.NoError(t, err)
		return inv(a)
	}
	require.FailNow(t, "unknown run state", "%s", state)
	return nil
}
