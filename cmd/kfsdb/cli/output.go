package cli

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"sync"
	"unicode"
	"unicode/utf8"
)

// writeJSON writes v as indented JSON, a command's --json output.
func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// NewSyncWriter returns w with its writes serialized, for output that the
// log handlers of many goroutines share with a command's own lines.
func NewSyncWriter(w io.Writer) io.Writer { return &syncWriter{w: w} }

// syncWriter serializes writes: slog handlers of many goroutines and the
// command's own output share one io.Writer.
type syncWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (s *syncWriter) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.w.Write(p)
}

// TermSafe returns w with every control character escaped, so that text
// from workers and tenants (error messages, reasons, worker and tenant
// ids) cannot move the operator's cursor, retitle the terminal or hide
// lines: C0 controls but newline and tab (\x1b, \r, \b...), DEL, C1
// controls (U+0080..U+009F), bidirectional overrides and invalid UTF-8
// are written as \xNN or \u{NNNN}. JSON output, whose encoder escapes C0
// controls itself, is unchanged but for C1 and bidi characters.
func TermSafe(w io.Writer) io.Writer { return termSafe{w} }

type termSafe struct{ w io.Writer }

func (t termSafe) Write(p []byte) (int, error) {
	if _, err := io.WriteString(t.w, escapeControls(string(p))); err != nil {
		return 0, err
	}
	return len(p), nil
}

// escapeControls is TermSafe's escaping of one string.
func escapeControls(s string) string {
	clean := true
	for _, r := range s {
		if unsafeRune(r) {
			clean = false
			break
		}
	}
	if clean {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); {
		r, n := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && n <= 1:
			fmt.Fprintf(&b, `\x%02x`, s[i])
		case r < 0x80 && unsafeRune(r):
			fmt.Fprintf(&b, `\x%02x`, r)
		case unsafeRune(r):
			fmt.Fprintf(&b, `\u{%04x}`, r)
		default:
			b.WriteString(s[i : i+n])
		}
		i += n
	}
	return b.String()
}

// unsafeRune says whether r is escaped: a control character other than
// newline and tab, invalid UTF-8, or a bidirectional formatting character.
func unsafeRune(r rune) bool {
	switch {
	case r == '\n' || r == '\t':
		return false
	case r == utf8.RuneError, unicode.IsControl(r):
		return true
	}
	return unicode.Is(unicode.Bidi_Control, r)
}
