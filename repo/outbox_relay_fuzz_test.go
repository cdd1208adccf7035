package repo

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"testing"
	"time"

	"github.com/google/uuid"
)

func FuzzClaimOutboxParams(f *testing.F) {
	f.Add("relay-1", int32(100), int64(0))
	f.Fuzz(func(t *testing.T, relayID string, batch int32, lockNanos int64) {
		bad := badFields{}
		bad.check("RelayID", okText(relayID, 255))
		bad.check("BatchSize", batch >= 1 && batch <= 100)
		bad.check("LockDuration", lockNanos >= 0)
		expectOutcome(t, bad, func(db DBTX) error {
			_, err := New(nil).ClaimOutbox(fuzzCtx, db, &ClaimOutboxParams{RelayID: relayID, BatchSize: batch, LockDuration: time.Duration(lockNanos)})
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
