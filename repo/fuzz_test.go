package repo

// Fuzz targets for every input validator and for DecodePayload.
//
// Each validator target calls the public Repo method on a fakeDB, a DBTX
// that records every call and answers each with errFakeDB. The properties:
//
//   - bad input (as an independent oracle of the documented rules judges
//     it) returns an *InputError (errors.Is ErrInvalidInput) naming one of
//     the fields the oracle found bad, and the database is never called:
//     no write on bad input;
//   - good input reaches the database exactly once (the error is errFakeDB,
//     never an *InputError), and every string that travels to PostgreSQL is
//     valid UTF-8 without NUL bytes (text columns refuse both);
//   - nothing panics.
//
// `go test ./repo` runs the committed corpus in testdata/fuzz as ordinary
// tests; `make fuzz` (FUZZTIME per target) and `make fuzz-short` fuzz each
// target in turn.

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/knowledgefs/kfsdb/kfstype"
)

// errFakeDB is what fakeDB answers every call with.
var errFakeDB = errors.New("fakeDB: reached the database")

// fakeDB is a DBTX that records calls and fails each one with errFakeDB.
type fakeDB struct {
	calls int
	args  [][]any
}

func (f *fakeDB) Exec(_ context.Context, _ string, args ...any) (pgconn.CommandTag, error) {
	f.record(args)
	return pgconn.CommandTag{}, errFakeDB
}

func (f *fakeDB) Query(_ context.Context, _ string, args ...any) (pgx.Rows, error) {
	f.record(args)
	return nil, errFakeDB
}

func (f *fakeDB) QueryRow(_ context.Context, _ string, args ...any) pgx.Row {
	f.record(args)
	return errRow{}
}

func (f *fakeDB) record(args []any) {
	f.calls++
	f.args = append(f.args, args)
}

type errRow struct{}

func (errRow) Scan(...any) error { return errFakeDB }

// strings returns every string argument sent, including those behind
// pointers and in slices.
func (f *fakeDB) strings() []string {
	var out []string
	for _, call := range f.args {
		for _, a := range call {
			switch v := a.(type) {
			case string:
				out = append(out, v)
			case *string:
				if v != nil {
					out = append(out, *v)
				}
			case []string:
				out = append(out, v...)
			}
		}
	}
	return out
}

// badFields is the oracle's verdict: the fields that break a rule. Empty
// means the input is valid.
type badFields map[string]bool

func (b badFields) check(field string, ok bool) {
	if !ok {
		b[field] = true
	}
}

// Oracle rules, written from the README's list and independent of
// validate.go.

// okText: required, 1..max characters (runes), valid UTF-8, no NUL.
func okText(s string, max int) bool {
	if len(s) == 0 || !utf8.ValidString(s) || strings.ContainsRune(s, 0) {
		return false
	}
	return len([]rune(s)) <= max
}

func okFingerprint(s string) bool {
	const prefix = "projection-set-sha256:"
	hex, found := strings.CutPrefix(s, prefix)
	if !found || len(hex) != 64 {
		return false
	}
	return strings.Trim(hex, "0123456789abcdef") == ""
}

// fuzzID turns fuzzer input into a UUID: zero exactly when n is 0.
func fuzzID(n uint64) uuid.UUID {
	var u uuid.UUID
	binary.BigEndian.PutUint64(u[8:], n)
	if n != 0 {
		u[0] = 0x01
	}
	return u
}

// expectOutcome runs call on a fresh fakeDB and checks its outcome against the
// oracle's verdict.
func expectOutcome(t *testing.T, bad badFields, call func(db DBTX) error) {
	t.Helper()
	db := &fakeDB{}
	err := call(db)
	if len(bad) > 0 {
		var ie *InputError
		if !errors.As(err, &ie) || !errors.Is(err, ErrInvalidInput) {
			t.Fatalf("oracle: bad fields %v; want *InputError, got %v", badKeys(bad), err)
		}
		if !bad[ie.Field] {
			t.Fatalf("InputError names field %q (%s); oracle's bad fields are %v", ie.Field, ie.Reason, badKeys(bad))
		}
		if db.calls != 0 {
			t.Fatalf("invalid input (%v) reached the database %d times", err, db.calls)
		}
		return
	}
	if errors.Is(err, ErrInvalidInput) {
		t.Fatalf("oracle: valid input; got %v", err)
	}
	if !errors.Is(err, errFakeDB) || db.calls != 1 {
		t.Fatalf("valid input: want one database call failing with errFakeDB, got %d calls and %v", db.calls, err)
	}
	for _, s := range db.strings() {
		if !utf8.ValidString(s) || strings.ContainsRune(s, 0) {
			t.Fatalf("string argument %q sent to PostgreSQL is not valid text", s)
		}
	}
}

func badKeys(m badFields) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	return out
}

func fuzzPtr[T any](v T) *T { return &v }

var fuzzCtx = context.Background()

func FuzzStartParams(f *testing.F) {
	f.Add("tenant-a", uint64(1), uint64(2), uint64(3), int32(1), int32(0), int32(0), false, false)
	f.Fuzz(func(t *testing.T, tenant string, space, asset, gen uint64, version, head, maxAttempts int32, deferred, hasAvailableAt bool) {
		p := &StartParams{
			TenantID: tenant, KnowledgeSpaceID: fuzzID(space), DocumentAssetID: fuzzID(asset), DocumentVersion: version,
			PublicationGenerationID: fuzzID(gen), BaseHeadRevision: head, MaxExecutionAttempts: maxAttempts, Deferred: deferred,
		}
		if hasAvailableAt {
			p.AvailableAt = fuzzPtr(time.Unix(1_700_000_000, 0))
		}
		bad := badFields{}
		bad.check("TenantID", okText(tenant, 255))
		bad.check("KnowledgeSpaceID", space != 0)
		bad.check("DocumentAssetID", asset != 0)
		bad.check("DocumentVersion", version > 0)
		bad.check("PublicationGenerationID", gen != 0)
		bad.check("BaseHeadRevision", head >= 0)
		bad.check("MaxExecutionAttempts", maxAttempts >= 0)
		bad.check("AvailableAt", !(deferred && hasAvailableAt))
		expectOutcome(t, bad, func(db DBTX) error {
			_, err := New(nil).Start(fuzzCtx, db, p)
			return err
		})
	})
}

// FuzzAttemptRef covers AttemptRef's validation through every control-plane
// call that takes one: Cancel and Supersede (with an optional reason, which
// is truncated, never refused), RetryFailed and ReleaseDeferred.
func FuzzAttemptRef(f *testing.F) {
	f.Add("tenant-a", uint64(1), uint64(2), false, int32(0), uint8(0), false, "")
	f.Fuzz(func(t *testing.T, tenant string, space, attempt uint64, hasExpected bool, expected int32, op uint8, hasReason bool, reason string) {
		ref := AttemptRef{TenantID: tenant, KnowledgeSpaceID: fuzzID(space), AttemptID: fuzzID(attempt)}
		if hasExpected {
			ref.ExpectedRowVersion = &expected
		}
		var why *string
		if hasReason {
			why = &reason
		}
		bad := badFields{}
		bad.check("TenantID", okText(tenant, 255))
		bad.check("KnowledgeSpaceID", space != 0)
		bad.check("AttemptID", attempt != 0)
		bad.check("ExpectedRowVersion", !hasExpected || expected >= 0)
		r := New(nil)
		expectOutcome(t, bad, func(db DBTX) error {
			var err error
			switch op % 4 {
			case 0:
				_, err = r.Cancel(fuzzCtx, db, &CancelParams{AttemptRef: ref, Reason: why})
			case 1:
				_, err = r.Supersede(fuzzCtx, db, &SupersedeParams{AttemptRef: ref, Reason: why})
			case 2:
				_, err = r.RetryFailed(fuzzCtx, db, &ref)
			case 3:
				_, err = r.ReleaseDeferred(fuzzCtx, db, &ref)
			}
			return err
		})
	})
}

// FuzzReads covers the tenant-scoped reads' validation.
func FuzzReads(f *testing.F) {
	f.Add("tenant-a", uint64(1), uint64(2), uint64(3), int32(1), uint8(0))
	f.Fuzz(func(t *testing.T, tenant string, attempt, space, asset uint64, version int32, op uint8) {
		r := New(nil)
		bad := badFields{}
		bad.check("TenantID", okText(tenant, 255))
		switch op % 4 {
		case 0, 1:
			bad.check("AttemptID", attempt != 0)
		case 2:
			bad.check("KnowledgeSpaceID", space != 0)
			bad.check("DocumentAssetID", asset != 0)
			bad.check("DocumentVersion", version > 0)
		}
		expectOutcome(t, bad, func(db DBTX) error {
			var err error
			switch op % 4 {
			case 0:
				_, err = r.GetAttempt(fuzzCtx, db, tenant, fuzzID(attempt))
			case 1:
				_, _, err = r.GetAttemptWithOutbox(fuzzCtx, db, tenant, fuzzID(attempt))
			case 2:
				_, err = r.ListDocumentVersionAttempts(fuzzCtx, db, &DocumentVersion{
					TenantID: tenant, KnowledgeSpaceID: fuzzID(space), DocumentAssetID: fuzzID(asset), DocumentVersion: version,
				})
			case 3:
				_, err = r.CountLiveAttempts(fuzzCtx, db, tenant)
			}
			return err
		})
	})
}

// FuzzAcquireLeaseParams covers AcquireLeaseParams and the Delivery it
// embeds (also through FailExhausted, which takes a bare Delivery).
func FuzzAcquireLeaseParams(f *testing.F) {
	f.Add(uint64(1), "job-1", false, "", "worker-1", int64(0), false)
	f.Fuzz(func(t *testing.T, attempt uint64, queueJobID string, hasExternal bool, externalJobID, workerID string, leaseNanos int64, exhaust bool) {
		d := Delivery{AttemptID: fuzzID(attempt), QueueJobID: queueJobID}
		if hasExternal {
			d.ExternalJobID = &externalJobID
		}
		bad := badFields{}
		bad.check("AttemptID", attempt != 0)
		bad.check("QueueJobID", okText(queueJobID, 255))
		bad.check("ExternalJobID", !hasExternal || okText(externalJobID, 255))
		r := New(nil)
		if exhaust {
			expectOutcome(t, bad, func(db DBTX) error {
				_, err := r.FailExhausted(fuzzCtx, db, &d)
				return err
			})
			return
		}
		bad.check("WorkerID", okText(workerID, 255))
		bad.check("LeaseDuration", leaseNanos >= 0)
		expectOutcome(t, bad, func(db DBTX) error {
			_, _, err := r.AcquireLease(fuzzCtx, db, &AcquireLeaseParams{Delivery: d, WorkerID: workerID, LeaseDuration: time.Duration(leaseNanos)})
			return err
		})
	})
}

// fuzzLease builds a Lease from fuzzer input and records the oracle's verdict
// on it.
func fuzzLease(bad badFields, has bool, attempt uint64, workerID string, token uint64) *Lease {
	if !has {
		bad["Lease"] = true
		return nil
	}
	bad.check("Lease.AttemptID", attempt != 0)
	bad.check("Lease.WorkerID", okText(workerID, 255))
	bad.check("Lease.Token", token != 0)
	return &Lease{AttemptID: fuzzID(attempt), WorkerID: workerID, Token: fuzzID(token)}
}

// FuzzLeaseCalls covers HeartbeatParams, AdvanceParams (checkpoint and
// candidate fingerprint, through Advance and AdvanceTo), Complete's lease
// and CompleteThroughParams.
func FuzzLeaseCalls(f *testing.F) {
	f.Add(true, uint64(1), "worker-1", uint64(2), uint8(0), int64(0), "parsed", false, uint64(0), false, "")
	f.Fuzz(func(t *testing.T, hasLease bool, attempt uint64, workerID string, token uint64, op uint8, leaseNanos int64,
		checkpoint string, hasCandidate bool, candidate uint64, hasFingerprint bool, fingerprint string,
	) {
		bad := badFields{}
		l := fuzzLease(bad, hasLease, attempt, workerID, token)
		r := New(nil)
		var candidateID *uuid.UUID
		var candidateFingerprint *string
		if hasCandidate {
			candidateID = fuzzPtr(fuzzID(candidate))
		}
		if hasFingerprint {
			candidateFingerprint = &fingerprint
		}
		checkCandidate := func() {
			if hasCandidate {
				bad.check("CandidatePublicationID", candidate != 0)
			}
			if hasFingerprint {
				bad.check("CandidateFingerprint", okFingerprint(fingerprint))
			}
			bad.check("CandidatePublicationID", hasCandidate == hasFingerprint)
		}
		switch op % 5 {
		case 0:
			bad.check("LeaseDuration", leaseNanos >= 0)
			expectOutcome(t, bad, func(db DBTX) error {
				_, err := r.Heartbeat(fuzzCtx, db, &HeartbeatParams{Lease: l, LeaseDuration: time.Duration(leaseNanos)})
				return err
			})
		case 1, 3:
			known := false
			for _, c := range []string{"queued", "parsed", "outline_built", "nodes_generated", "projection_built", "smoke_eval_passed"} {
				known = known || c == checkpoint
			}
			bad.check("Checkpoint", known)
			checkCandidate()
			p := &AdvanceParams{Lease: l, Checkpoint: kfstype.Checkpoint(checkpoint),
				CandidatePublicationID: candidateID, CandidateFingerprint: candidateFingerprint}
			advance := r.Advance
			if op%5 == 3 {
				advance = r.AdvanceTo
			}
			expectOutcome(t, bad, func(db DBTX) error {
				_, err := advance(fuzzCtx, db, p)
				return err
			})
		case 2:
			expectOutcome(t, bad, func(db DBTX) error {
				_, err := r.Complete(fuzzCtx, db, l)
				return err
			})
		case 4:
			checkCandidate()
			expectOutcome(t, bad, func(db DBTX) error {
				_, err := r.CompleteThrough(fuzzCtx, db, &CompleteThroughParams{Lease: l,
					CandidatePublicationID: candidateID, CandidateFingerprint: candidateFingerprint})
				return err
			})
		}
	})
}

// FuzzFailParams covers FailParams and ScheduleRetryParams; the stored
// message must be TruncateMessage of the given one.
func FuzzFailParams(f *testing.F) {
	f.Add(true, uint64(1), "worker-1", uint64(2), "DOCUMENT_COMPILATION_FAILED", "boom", false, int64(0))
	f.Fuzz(func(t *testing.T, hasLease bool, attempt uint64, workerID string, token uint64, code, message string, retry bool, delayNanos int64) {
		bad := badFields{}
		l := fuzzLease(bad, hasLease, attempt, workerID, token)
		bad.check("ErrorCode", okText(code, 64))
		bad.check("ErrorMessage", message != "")
		r := New(nil)
		var sent *fakeDB
		if retry {
			bad.check("RetryDelay", delayNanos > 0)
			expectOutcome(t, bad, func(db DBTX) error {
				sent = db.(*fakeDB)
				_, err := r.ScheduleRetry(fuzzCtx, db, &ScheduleRetryParams{Lease: l, RetryDelay: time.Duration(delayNanos), ErrorCode: code, ErrorMessage: message})
				return err
			})
		} else {
			expectOutcome(t, bad, func(db DBTX) error {
				sent = db.(*fakeDB)
				_, err := r.Fail(fuzzCtx, db, &FailParams{Lease: l, ErrorCode: code, ErrorMessage: message})
				return err
			})
		}
		if len(bad) == 0 {
			requireSent(t, sent, TruncateMessage(message))
		}
	})
}

// requireSent checks that s is among the string arguments sent.
func requireSent(t *testing.T, db *fakeDB, s string) {
	t.Helper()
	for _, got := range db.strings() {
		if got == s {
			return
		}
	}
	t.Fatalf("truncated message %q was not sent", s)
}

// FuzzTruncateMessage checks the cut at a limit the fuzzer picks (0..255,
// so that short inputs reach it), TruncateMessage itself at 4,096 and
// TruncateErrorCode at 64.
func FuzzTruncateMessage(f *testing.F) {
	f.Add("boom", uint8(2))
	f.Add(strings.Repeat("é", MaxErrorMessageRunes+1), uint8(0))
	f.Fuzz(func(t *testing.T, s string, limit uint8) {
		checkTruncated(t, s, int(limit), truncateText(s, int(limit)))
		checkTruncated(t, s, MaxErrorMessageRunes, TruncateMessage(s))
		checkTruncated(t, s, MaxErrorCodeLength, TruncateErrorCode(s))
	})
}

// checkTruncated checks got = truncation of s to max runes: valid UTF-8,
// no NUL, at most max runes, a prefix of the sanitized input (invalid
// UTF-8 and NUL replaced by U+FFFD) cut no shorter than needed, valid
// short text unchanged, idempotent.
func checkTruncated(t *testing.T, s string, max int, got string) {
	t.Helper()
	if !utf8.ValidString(got) {
		t.Fatalf("max %d: result is not valid UTF-8: %q", max, got)
	}
	if strings.ContainsRune(got, 0) {
		t.Fatalf("max %d: result contains NUL: %q", max, got)
	}
	n := utf8.RuneCountInString(got)
	if n > max {
		t.Fatalf("max %d: result has %d runes", max, n)
	}
	sanitized := strings.ReplaceAll(strings.ToValidUTF8(s, "\uFFFD"), "\x00", "\uFFFD")
	if !strings.HasPrefix(sanitized, got) {
		t.Fatalf("max %d: result %q is not a prefix of the sanitized input %q", max, got, sanitized)
	}
	if want := min(utf8.RuneCountInString(sanitized), max); n != want {
		t.Fatalf("max %d: result has %d runes, want %d (cut more than needed)", max, n, want)
	}
	if utf8.ValidString(s) && !strings.ContainsRune(s, 0) && utf8.RuneCountInString(s) <= max && got != s {
		t.Fatalf("max %d: valid short text changed: %q -> %q", max, s, got)
	}
	if again := truncateText(got, max); again != got {
		t.Fatalf("max %d: not idempotent: %q -> %q", max, got, again)
	}
}

func FuzzClaimParams(f *testing.F) {
	f.Add("relay-1", int32(100), int64(0))
	f.Fuzz(func(t *testing.T, relayID string, batch int32, lockNanos int64) {
		bad := badFields{}
		bad.check("RelayID", okText(relayID, 255))
		bad.check("BatchSize", batch >= 1 && batch <= 100)
		bad.check("LockDuration", lockNanos >= 0)
		expectOutcome(t, bad, func(db DBTX) error {
			_, err := New(nil).ClaimOutbox(fuzzCtx, db, &ClaimParams{RelayID: relayID, BatchSize: batch, LockDuration: time.Duration(lockNanos)})
			return err
		})
	})
}

// FuzzMarkDispatchedParams builds a batch of n dispatches in which the
// fuzzer picks which entry has a zero outbox id, a zero lock token, a
// duplicate outbox id, or the fuzzed job ids.
func FuzzMarkDispatchedParams(f *testing.F) {
	f.Add(uint8(1), int8(-1), int8(-1), int8(-1), int8(0), "job-1", false, "", int64(0))
	f.Fuzz(func(t *testing.T, n uint8, zeroOutbox, zeroToken, dupAt, fuzzAt int8, queueJobID string, hasExternal bool, externalJobID string, visibilityNanos int64) {
		bad := badFields{}
		size := int(n) % 103 // 0..102: both sides of 1..100
		bad.check("Dispatches", size >= 1 && size <= 100)
		bad.check("VisibilityTimeout", visibilityNanos >= 0)
		ds := make([]Dispatch, size)
		for i := range ds {
			field := fmt.Sprintf("Dispatches[%d].", i)
			d := Dispatch{OutboxID: fuzzID(uint64(i) + 1), LockToken: fuzzID(uint64(i) + 1000), QueueJobID: fmt.Sprintf("job-%d", i)}
			if i == int(fuzzAt) {
				d.QueueJobID = queueJobID
				bad.check(field+"QueueJobID", okText(queueJobID, 255))
				if hasExternal {
					d.ExternalJobID = &externalJobID
					bad.check(field+"ExternalJobID", okText(externalJobID, 255))
				}
			}
			if i == int(zeroOutbox) {
				d.OutboxID = uuid.Nil
				bad[field+"OutboxID"] = true
			}
			if i == int(zeroToken) {
				d.LockToken = uuid.Nil
				bad[field+"LockToken"] = true
			}
			if i > 0 && i == int(dupAt) {
				d.OutboxID = ds[0].OutboxID
				bad[field+"OutboxID"] = true
			}
			ds[i] = d
		}
		expectOutcome(t, bad, func(db DBTX) error {
			_, err := New(nil).MarkDispatched(fuzzCtx, db, &MarkDispatchedParams{Dispatches: ds, VisibilityTimeout: time.Duration(visibilityNanos)})
			return err
		})
	})
}

func FuzzReleaseOutboxParams(f *testing.F) {
	f.Add(uint64(1), uint64(2), int64(time.Second), int32(0), "publish failed")
	f.Fuzz(func(t *testing.T, outbox, token uint64, backoffNanos int64, maxAttempts int32, lastError string) {
		bad := badFields{}
		bad.check("OutboxID", outbox != 0)
		bad.check("LockToken", token != 0)
		bad.check("Backoff", backoffNanos > 0)
		bad.check("MaxDispatchAttempts", maxAttempts >= 0)
		bad.check("LastError", lastError != "")
		var sent *fakeDB
		expectOutcome(t, bad, func(db DBTX) error {
			sent = db.(*fakeDB)
			_, err := New(nil).ReleaseOutbox(fuzzCtx, db, &ReleaseOutboxParams{
				OutboxID: fuzzID(outbox), LockToken: fuzzID(token), Backoff: time.Duration(backoffNanos),
				MaxDispatchAttempts: maxAttempts, LastError: lastError,
			})
			return err
		})
		if len(bad) == 0 {
			requireSent(t, sent, TruncateMessage(lastError))
		}
	})
}

func FuzzPurgeParams(f *testing.F) {
	f.Add("tenant-a", int64(1_700_000_000), false, int32(0))
	f.Fuzz(func(t *testing.T, tenant string, cutoffUnix int64, zeroCutoff bool, batch int32) {
		cutoff := time.Unix(cutoffUnix, 0)
		if zeroCutoff {
			cutoff = time.Time{}
		}
		bad := badFields{}
		bad.check("TenantID", okText(tenant, 255))
		// The zero time.Time means "not set", also when it comes from
		// time.Unix (year 1).
		bad.check("CompletedBefore", !zeroCutoff && !cutoff.Equal(time.Time{}))
		bad.check("BatchSize", batch >= 0 && batch <= 10_000)
		expectOutcome(t, bad, func(db DBTX) error {
			_, err := New(nil).Purge(fuzzCtx, db, &PurgeParams{TenantID: tenant, CompletedBefore: cutoff, BatchSize: batch})
			return err
		})
	})
}

// payloadOracle decides independently of decodePayload whether raw is an
// outbox payload: one JSON object holding exactly one member, named
// attemptId written literally (no escapes: PostgreSQL's jsonb never
// writes any), whose string value is a non-zero UUID in the 8-4-4-4-12
// hex form. JSON whitespace is allowed (jsonb prints `{"attemptId": "…"}`).
func payloadOracle(raw []byte) (uuid.UUID, bool) {
	if !json.Valid(raw) {
		return uuid.Nil, false
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return uuid.Nil, false
	}
	before := dec.InputOffset()
	if tok, err := dec.Token(); err != nil || tok != "attemptId" {
		return uuid.Nil, false
	}
	if string(bytes.TrimSpace(raw[before:dec.InputOffset()])) != `"attemptId"` {
		return uuid.Nil, false
	}
	tok, err := dec.Token()
	s, isString := tok.(string)
	if err != nil || !isString || !canonicalUUID(s) {
		return uuid.Nil, false
	}
	if tok, err := dec.Token(); err != nil || tok != json.Delim('}') {
		return uuid.Nil, false
	}
	if _, err := dec.Token(); err != io.EOF {
		return uuid.Nil, false
	}
	u := uuid.MustParse(s)
	return u, u != uuid.Nil
}

func canonicalUUID(s string) bool {
	if len(s) != 36 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case i == 8 || i == 13 || i == 18 || i == 23:
			if c != '-' {
				return false
			}
		case !('0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F'):
			return false
		}
	}
	return true
}

func FuzzDecodePayload(f *testing.F) {
	f.Add([]byte(`{"attemptId":"0190b7a2-1c2d-7e3f-8a4b-5c6d7e8f9a0b"}`))
	f.Fuzz(func(t *testing.T, raw []byte) {
		p, err := DecodePayload(raw)
		want, ok := payloadOracle(raw)
		if !ok {
			var ie *InputError
			if err == nil || !errors.As(err, &ie) || !errors.Is(err, ErrInvalidInput) {
				t.Fatalf("DecodePayload(%q) = %v, %v; want *InputError", raw, p, err)
			}
			return
		}
		if err != nil {
			t.Fatalf("DecodePayload(%q): %v; want attempt %s", raw, err, want)
		}
		if p.AttemptID != want {
			t.Fatalf("DecodePayload(%q) = %s; want %s", raw, p.AttemptID, want)
		}
		// Round trip: what the writer produces (compact, and jsonb's
		// spaced form) decodes to the same id.
		for _, enc := range []string{
			`{"attemptId":"` + want.String() + `"}`,
			`{"attemptId": "` + want.String() + `"}`,
		} {
			if q, err := DecodePayload([]byte(enc)); err != nil || q.AttemptID != want {
				t.Fatalf("round trip of %s: %v, %v", enc, q, err)
			}
		}
		if b, err := json.Marshal(map[string]string{"attemptId": p.AttemptID.String()}); err != nil {
			t.Fatal(err)
		} else if q, err := DecodePayload(b); err != nil || q.AttemptID != want {
			t.Fatalf("round trip of %s: %v, %v", b, q, err)
		}
	})
}
