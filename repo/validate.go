package repo

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/google/uuid"

	// A leaf (it imports nothing of kfsdb): farm-studio draws internal/ as one
	// room, so this import shows as an arrow up to pglisten's room, which
	// imports repo; no package cycle lies behind it.
	"github.com/knowledgefs/kfsdb/internal/nilvalue"
	"github.com/knowledgefs/kfsdb/kfstype"
)

// Limits enforced before any round trip; they mirror the schema's column
// sizes so that a bad value never reaches the database.
const (
	MaxTenantIDLength    = 255
	MaxJobIDLength       = 255
	MaxWorkerIDLength    = 255
	MaxErrorCodeLength   = 64
	MaxErrorMessageRunes = 4096
	// MaxBatchSize bounds every batch of the runtime's transitions:
	// ClaimOutboxParams.BatchSize, MarkDispatchedParams.Dispatches,
	// StartManyParams.Starts, CompleteManyParams.Entries and
	// FetchLeasesParams.BatchSize (Purge, a retention delete, has
	// MaxPurgeBatch).
	MaxBatchSize      = 100
	fingerprintPrefix = "projection-set-sha256:"
)

// validator collects the first failure; each check is a no-op once one
// failed, so call sites read as a flat list of rules.
type validator struct{ err *InputError }

func (v *validator) fail(field, reason string) {
	if v.err == nil {
		v.err = &InputError{Field: field, Reason: reason}
	}
}

func (v *validator) result() error {
	if v.err == nil {
		return nil
	}
	return v.err
}

func (v *validator) uuid(field string, id uuid.UUID) {
	if id == uuid.Nil {
		v.fail(field, "must not be the zero UUID")
	}
}

// text checks a required string of 1..max characters (runes), valid UTF-8.
func (v *validator) text(field, s string, max int) {
	switch {
	case s == "":
		v.fail(field, "must not be empty")
	case !utf8.ValidString(s):
		v.fail(field, "must be valid UTF-8")
	case strings.IndexByte(s, 0) >= 0:
		v.fail(field, "must not contain NUL bytes")
	case utf8.RuneCountInString(s) > max:
		v.fail(field, "must be at most "+strconv.Itoa(max)+" characters")
	}
}

func (v *validator) optionalText(field string, s *string, max int) {
	if s != nil {
		v.text(field, *s, max)
	}
}

func (v *validator) positive(field string, n int32) {
	if n <= 0 {
		v.fail(field, "must be greater than 0")
	}
}

func (v *validator) duration(field string, d time.Duration) {
	if d <= 0 {
		v.fail(field, "must be a positive duration")
	}
}

// optionalDuration checks a duration that is zero for its default, or
// positive.
func (v *validator) optionalDuration(field string, d time.Duration) {
	if d != 0 {
		v.duration(field, d)
	}
}

// claim checks what a batch claim names (ClaimOutboxParams',
// FetchLeasesParams'): the claimant (the relay or the worker), 1..255
// characters; a BatchSize of 1..MaxBatchSize; and how long each row is
// held, zero for its default.
func (v *validator) claim(idField, id string, batchSize int32, holdField string, hold time.Duration) {
	v.text(idField, id, MaxWorkerIDLength)
	if batchSize < 1 || batchSize > MaxBatchSize {
		v.fail("BatchSize", fmt.Sprintf("must be 1..%d", MaxBatchSize))
	}
	v.optionalDuration(holdField, hold)
}

// errorReport checks the error a lease holder records on its attempt
// (FailParams' and ScheduleRetryParams' ErrorCode and ErrorMessage): a
// code of 1..MaxErrorCodeLength characters, and a message that is not
// empty (TruncateMessage cuts it to MaxErrorMessageRunes when stored).
func (v *validator) errorReport(code, message string) {
	v.text("ErrorCode", code, MaxErrorCodeLength)
	if message == "" {
		v.fail("ErrorMessage", "must not be empty")
	}
}

// fingerprint checks the projection-set-sha256:<64 lowercase hex> form.
func (v *validator) fingerprint(field, s string) {
	if len(s) != len(fingerprintPrefix)+64 || s[:len(fingerprintPrefix)] != fingerprintPrefix {
		v.fail(field, "must be "+fingerprintPrefix+" followed by 64 lowercase hex digits")
		return
	}
	for _, c := range s[len(fingerprintPrefix):] {
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			v.fail(field, "must be "+fingerprintPrefix+" followed by 64 lowercase hex digits")
			return
		}
	}
}

// ValidateFingerprint reports whether s is a well-formed candidate
// fingerprint (projection-set-sha256: followed by 64 lowercase hex digits).
func ValidateFingerprint(s string) error {
	var v validator
	v.fingerprint("fingerprint", s)
	return v.result()
}

// TruncateMessage cuts s to at most MaxErrorMessageRunes runes, never in
// the middle of a rune, and replaces what PostgreSQL's text type refuses
// (invalid UTF-8 and NUL bytes) with U+FFFD.
func TruncateMessage(s string) string { return truncateText(s, MaxErrorMessageRunes) }

// TruncateErrorCode cuts s to at most MaxErrorCodeLength runes and
// sanitizes it exactly as TruncateMessage does, so that a code from
// anywhere (a handler's worker.Fatal) is one Fail and ScheduleRetry
// accept, unless it is empty.
func TruncateErrorCode(s string) string { return truncateText(s, MaxErrorCodeLength) }

// ValidateWorkerID reports whether id is a usable worker or relay id (the
// lease's worker_id, the claim's locked_by): 1..255 characters of valid
// UTF-8 without NUL.
func ValidateWorkerID(id string) error {
	var v validator
	v.text("WorkerID", id, MaxWorkerIDLength)
	return v.result()
}

// ValidateTenantLists reports whether include and exclude are usable
// tenant lists for FetchLeasesParams.Tenants and ExcludeTenants (and
// pgsource's Config.Tenants and ExcludeTenants): at most one of them set;
// include nil (every tenant) or 1..MaxTenantList entries, exclude at most
// MaxTenantList; each entry a tenant id (1..255 characters of valid UTF-8
// without NUL), none twice. The *InputError names the field ("Tenants",
// "ExcludeTenants[2]").
func ValidateTenantLists(include, exclude []string) error {
	var v validator
	v.tenantLists(include, exclude)
	return v.result()
}

func (v *validator) tenantLists(include, exclude []string) {
	switch {
	case include != nil && len(exclude) > 0:
		v.fail("ExcludeTenants", "must be empty when Tenants is set (an include list or an exclude list, not both)")
	case include != nil && len(include) == 0:
		v.fail("Tenants", "must not be empty when set (it would serve no tenant); nil serves every tenant")
	}
	v.tenantList("Tenants", include)
	v.tenantList("ExcludeTenants", exclude)
}

func (v *validator) tenantList(field string, ids []string) {
	if len(ids) > MaxTenantList {
		v.fail(field, fmt.Sprintf("must hold at most %d tenants, got %d", MaxTenantList, len(ids)))
		return
	}
	seen := make(map[string]bool, len(ids))
	for i, id := range ids {
		name := fmt.Sprintf("%s[%d]", field, i)
		v.text(name, id, MaxTenantIDLength)
		if seen[id] {
			v.fail(name, fmt.Sprintf("repeats tenant %q", id))
		}
		seen[id] = true
	}
}

// ValidateJobID reports whether id is a usable queue (or external) job
// id, as a Publisher returns it: 1..255 characters of valid UTF-8 without
// NUL.
func ValidateJobID(id string) error {
	var v validator
	v.text("QueueJobID", id, MaxJobIDLength)
	return v.result()
}

// truncateText is TruncateMessage with the limit as a parameter, so that
// fuzzing reaches the cut with short inputs.
func truncateText(s string, max int) string {
	if !utf8.ValidString(s) {
		s = strings.ToValidUTF8(s, "\uFFFD")
	}
	s = strings.ReplaceAll(s, "\x00", "\uFFFD")
	if utf8.RuneCountInString(s) <= max {
		return s
	}
	n := 0
	for i := range s {
		if n == max {
			return s[:i]
		}
		n++
	}
	return s
}

// call starts validating a call of a Repo method: the receiver, the
// context and the DBTX must be usable.
func (r *Repo) call(ctx context.Context, db DBTX) *validator {
	v := &validator{}
	switch {
	case r == nil:
		v.fail("Repo", "must not be nil (use repo.New)")
	case nilvalue.Is(ctx):
		v.fail("ctx", "must not be nil")
	case nilvalue.Is(db):
		v.fail("db", "must not be nil")
	}
	return v
}

// set fails field when p is nil, and reports whether p is set.
func set[T any](v *validator, field string, p *T) bool {
	if p == nil {
		v.fail(field, "must not be nil")
		return false
	}
	return true
}

// timestamp checks that t is within PostgreSQL's timestamptz range
// (4713 BC to 294276 AD).
func (v *validator) timestamp(field string, t time.Time) {
	if y := t.Year(); y < -4712 || y > 294275 {
		v.fail(field, "is outside PostgreSQL's timestamp range")
	}
}

// MaxTraceStateLength bounds kfstype.TraceContext.TraceState, as W3C Trace
// Context lets a carrier do (and migration 0009's check does).
const MaxTraceStateLength = 512

// traceContext checks a W3C traceparent (version 00 form, not version ff,
// non-zero trace and parent ids) and tracestate; the zero TraceContext is
// valid (no trace context).
func (v *validator) traceContext(field string, tc kfstype.TraceContext) {
	if tc.IsZero() {
		if tc.TraceState != "" {
			v.fail(field+".TraceState", "must be empty without a TraceParent")
		}
		return
	}
	const form = "must be a W3C traceparent: 2-32-16-2 lowercase hex digits joined by '-', not version ff, non-zero ids"
	p := tc.TraceParent
	if len(p) != 55 || p[2] != '-' || p[35] != '-' || p[52] != '-' || p[:2] == "ff" ||
		p[3:35] == strings.Repeat("0", 32) || p[36:52] == strings.Repeat("0", 16) {
		v.fail(field+".TraceParent", form)
		return
	}
	for i, c := range p {
		if (i == 2 || i == 35 || i == 52) || (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') {
			continue
		}
		v.fail(field+".TraceParent", form)
		return
	}
	if len(tc.TraceState) > MaxTraceStateLength {
		v.fail(field+".TraceState", "must be at most "+strconv.Itoa(MaxTraceStateLength)+" characters")
		return
	}
	for _, c := range []byte(tc.TraceState) {
		if c < 0x20 || c > 0x7e {
			v.fail(field+".TraceState", "must be printable ASCII")
			return
		}
	}
}

// entryError runs check on a batch entry and names the entry in its
// *InputError.
func entryError(field string, i int, check func(*validator)) error {
	var v validator
	check(&v)
	if v.err == nil {
		return nil
	}
	return &InputError{Field: fmt.Sprintf("%s[%d].%s", field, i, v.err.Field), Reason: v.err.Reason}
}

// lease checks a lease presented to a lease-fenced transition (Heartbeat
// and every write of worker.go): set, with its attempt, worker and token.
func (v *validator) lease(l *Lease) {
	if l == nil {
		v.fail("Lease", "must be set")
		return
	}
	v.uuid("Lease.AttemptID", l.AttemptID)
	v.text("Lease.WorkerID", l.WorkerID, MaxWorkerIDLength)
	v.uuid("Lease.Token", l.Token)
}

// candidate checks a candidate publication given with a lease holder's
// write (Advance, CompleteThrough, CompleteMany): the id and the
// fingerprint together or neither, the id not zero, the fingerprint well
// formed.
func (v *validator) candidate(id *uuid.UUID, fingerprint *string) {
	if (id == nil) != (fingerprint == nil) {
		v.fail("CandidatePublicationID", "and CandidateFingerprint go together")
	}
	if id != nil {
		v.uuid("CandidatePublicationID", *id)
	}
	if fingerprint != nil {
		v.fingerprint("CandidateFingerprint", *fingerprint)
	}
}
