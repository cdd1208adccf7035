package worker

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/knowledgefs/kfsdb/repo"
)

// FuzzJudgeRecordable: whatever code and message a handler's error
// carries, the worker's verdict is one that repo.Fail and
// repo.ScheduleRetry accept (the README's rules: a code of 1..64
// characters of valid UTF-8 without NUL, a non-empty message), so the
// outcome is recorded and the attempt is never run again for it.
func FuzzJudgeRecordable(f *testing.F) {
	for _, s := range []struct{ code, message string }{
		{"PDF_ENCRYPTED", "boom"}, {"", ""}, {"X" + strings.Repeat("é", 70), ""},
		{strings.Repeat("🔥", 70), "a\xffb"}, {"BAD\xffCODE", "\x00"}, {"NUL\x00", "a\x00b"},
		{strings.Repeat("x", 64) + "é", strings.Repeat("é", repo.MaxErrorMessageRunes+1)},
	} {
		for form := range uint8(6) {
			f.Add(s.code, s.message, form%2 == 0, form)
		}
	}
	// Both error rules: upstream's, and RetryPlainErrors.
	ws := []*Worker{{cfg: (&Config{}).withDefaults()}, {cfg: (&Config{RetryPlainErrors: true}).withDefaults()}}
	f.Fuzz(func(t *testing.T, code, message string, retryable bool, form uint8) {
		w := ws[form/3%2]
		var herr error = &Error{Code: code, Retryable: retryable, Err: errors.New(message)}
		switch form % 3 {
		case 1:
			herr = fmt.Errorf("%s: %w", message, herr)
		case 2:
			herr = errors.New(message)
		}
		v := w.judge(herr, false)
		if v.code == "" || !utf8.ValidString(v.code) || strings.ContainsRune(v.code, 0) || utf8.RuneCountInString(v.code) > repo.MaxErrorCodeLength {
			t.Fatalf("code %q of %#v is not recordable", v.code, herr)
		}
		if v.message == "" {
			t.Fatalf("empty message for %#v", herr)
		}
		if form%3 == 0 && code != "" && utf8.ValidString(code) && !strings.ContainsRune(code, 0) {
			// A valid code is kept, cut at a rune boundary.
			if want := []rune(code)[:min(utf8.RuneCountInString(code), repo.MaxErrorCodeLength)]; v.code != string(want) {
				t.Fatalf("code %q stored as %q, want %q", code, v.code, string(want))
			}
		}
	})
}
