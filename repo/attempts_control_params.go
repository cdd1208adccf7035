package repo

// The inputs of the transitions in attempts_control.go: their *Params
// types and AttemptRef, the defaults and bounds of their fields, and the
// checks that validate them.

import (
	"time"

	"github.com/google/uuid"

	"github.com/knowledgefs/kfsdb/kfstype"
)

// MaxExecutionAttemptsDefault is StartParams.MaxExecutionAttempts when zero.
const MaxExecutionAttemptsDefault = 5

// StartParams identifies the document version to compile.
type StartParams struct {
	// TenantID owns the space, 1..255 characters.
	TenantID string
	// KnowledgeSpaceID is the tenant's space the document belongs to.
	KnowledgeSpaceID uuid.UUID
	// DocumentAssetID is the document asset; with DocumentVersion it names
	// the version to compile, which must exist.
	DocumentAssetID uuid.UUID
	// DocumentVersion must be > 0.
	DocumentVersion int32
	// PublicationGenerationID is the caller's generation id, stored as is.
	PublicationGenerationID uuid.UUID
	// BaseHeadRevision must equal the space's publication head revision
	// (0 when the space has none), or Start returns *HeadConflictError.
	BaseHeadRevision int32
	// MaxExecutionAttempts bounds AcquireLease. Defaults to
	// MaxExecutionAttemptsDefault.
	MaxExecutionAttempts int32
	// Deferred parks the outbox row (available_at = infinity) until
	// ReleaseDeferred. Defaults to false: due at once.
	Deferred bool
	// AvailableAt delays the first publication. Defaults to now; not
	// allowed with Deferred.
	AvailableAt *time.Time
	// TraceContext is the caller's trace context (adapters/otel's
	// TraceContext(ctx) gives it), stored with a created attempt in the
	// same statement so that the worker's span joins the Start's trace. A
	// Start that finds a live attempt stores nothing. Defaults to none:
	// nothing is stored.
	TraceContext kfstype.TraceContext
}

func (p *StartParams) validate(v *validator) {
	if !set(v, "StartParams", p) {
		return
	}
	v.text("TenantID", p.TenantID, MaxTenantIDLength)
	v.uuid("KnowledgeSpaceID", p.KnowledgeSpaceID)
	v.uuid("DocumentAssetID", p.DocumentAssetID)
	v.positive("DocumentVersion", p.DocumentVersion)
	v.uuid("PublicationGenerationID", p.PublicationGenerationID)
	if p.BaseHeadRevision < 0 {
		v.fail("BaseHeadRevision", "must be >= 0")
	}
	if p.MaxExecutionAttempts < 0 {
		v.fail("MaxExecutionAttempts", "must be > 0 (or 0 for the default)")
	}
	if p.Deferred && p.AvailableAt != nil {
		v.fail("AvailableAt", "must not be set on a deferred start")
	}
	if p.AvailableAt != nil {
		v.timestamp("AvailableAt", *p.AvailableAt)
	}
	v.traceContext("TraceContext", p.TraceContext)
}

// StartManyParams is a batch of starts.
type StartManyParams struct {
	// Starts are the document versions to start, 1..MaxBatchSize of them,
	// each named once. Deferred, AvailableAt and TraceContext must be
	// unset (use Start).
	Starts []*StartParams
}

// AttemptRef names an attempt for a control-plane call: tenant and space
// scope it, so another tenant's attempt is ErrNotFound.
type AttemptRef struct {
	// TenantID is the attempt's tenant, 1..255 characters.
	TenantID string
	// KnowledgeSpaceID is the attempt's space.
	KnowledgeSpaceID uuid.UUID
	// AttemptID is the attempt.
	AttemptID uuid.UUID
	// ExpectedRowVersion, when set, refuses the call with
	// ErrStaleRowVersion unless the row is at exactly this version.
	// Defaults to nil: no check.
	ExpectedRowVersion *int32
}

func (ref *AttemptRef) validate(v *validator) {
	if !set(v, "AttemptRef", ref) {
		return
	}
	v.text("TenantID", ref.TenantID, MaxTenantIDLength)
	v.uuid("KnowledgeSpaceID", ref.KnowledgeSpaceID)
	v.uuid("AttemptID", ref.AttemptID)
	if ref.ExpectedRowVersion != nil && *ref.ExpectedRowVersion < 0 {
		v.fail("ExpectedRowVersion", "must be >= 0")
	}
}

// ReleaseDeferredParams names the deferred attempt to release.
type ReleaseDeferredParams struct {
	// AttemptRef names the attempt (tenant, space, id, expected version).
	AttemptRef
}

// CancelParams names the attempt to cancel.
type CancelParams struct {
	// AttemptRef names the attempt (tenant, space, id, expected version).
	AttemptRef
	// Reason, when set, is stored as last_error_message with error code
	// CANCELED (cut to 4,096 characters). Defaults to nil: the attempt's
	// last error is kept.
	Reason *string
}

// SupersedeParams names the attempt to supersede.
type SupersedeParams struct {
	// AttemptRef names the attempt (tenant, space, id, expected version).
	AttemptRef
	// Reason, when set, is stored as last_error_message with error code
	// SUPERSEDED (cut to 4,096 characters). Defaults to nil.
	Reason *string
}

// RetryFailedParams names the failed attempt to retry.
type RetryFailedParams struct {
	// AttemptRef names the attempt (tenant, space, id, expected version).
	AttemptRef
}

// PurgeBatchSizeDefault is PurgeParams.BatchSize when zero; MaxPurgeBatch
// bounds it.
const (
	PurgeBatchSizeDefault = 1000
	MaxPurgeBatch         = 10000
)

// PurgeParams selects terminal attempts to delete.
type PurgeParams struct {
	// TenantID is the tenant whose attempts go, 1..255 characters.
	TenantID string
	// CompletedBefore is the retention cut-off: attempts completed strictly
	// before it go.
	CompletedBefore time.Time
	// BatchSize bounds one call (1..MaxPurgeBatch). Defaults to
	// PurgeBatchSizeDefault.
	BatchSize int32
}
