// Package escape makes text from the database and from clients (tenant
// ids, error messages, worker ids, reasons, forwarded headers) safe to
// print to a terminal or a log: a value cannot move the cursor, retitle
// the terminal, reorder what follows it (bidirectional overrides) or,
// through Field, start a line of its own. The kfsdb command's tables and
// text output and every audit line, the CLI's and the console's, escape
// through it.
package escape

import (
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"
)

// Field returns s with every character that does not print as itself
// escaped, newline and tab included: one value of a table row or a log
// line stays on its line and in its column. C0 controls and DEL are
// written \xNN (a newline is \x0a), other non-printing runes (C1
// controls, bidirectional and other format characters, line and paragraph
// separators) \u{NNNN}, and bytes that are not UTF-8 \xNN. Printing text,
// spaces and backslashes included, is unchanged.
func Field(s string) string { return escape(s, fieldUnsafe) }

// Lines is Field but for newline and tab, which it keeps: for a whole
// output stream whose lines the program itself ends.
func Lines(s string) string { return escape(s, lineUnsafe) }

func escape(s string, unsafe func(rune) bool) string {
	if !strings.ContainsFunc(s, unsafe) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); {
		r, n := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && n <= 1:
			fmt.Fprintf(&b, `\x%02x`, s[i])
		case r < 0x80 && unsafe(r):
			fmt.Fprintf(&b, `\x%02x`, r)
		case unsafe(r):
			fmt.Fprintf(&b, `\u{%04x}`, r)
		default:
			b.WriteString(s[i : i+n])
		}
		i += n
	}
	return b.String()
}

// fieldUnsafe says whether Field escapes r: a rune that is not graphic
// (letters, marks, numbers, punctuation, symbols, spaces; not controls
// nor format characters such as U+202E, the right-to-left override, nor
// U+2028, the line separator), or invalid UTF-8 (which decodes as
// utf8.RuneError).
func fieldUnsafe(r rune) bool {
	return r == utf8.RuneError || !unicode.IsGraphic(r)
}

// lineUnsafe is fieldUnsafe but for newline and tab.
func lineUnsafe(r rune) bool {
	return r != '\n' && r != '\t' && fieldUnsafe(r)
}
