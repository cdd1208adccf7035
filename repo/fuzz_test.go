package repo

// Fuzz targets for every input validator and for DecodePayload, each in
// the _fuzz_test.go beside its code (start_fuzz_test.go for start.go,
// lease_fuzz_test.go for lease.go, …); this file holds what they share.
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
	"context"
	"encoding/binary"
	"errors"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
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
