package repo

import (
	"strings"
	"testing"
	"unicode/utf8"
)

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
