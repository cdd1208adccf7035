package repo

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"testing"

	"github.com/google/uuid"
)

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
