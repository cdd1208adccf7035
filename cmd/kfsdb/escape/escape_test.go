package escape

import "testing"

func TestFieldAndLines(t *testing.T) {
	for _, tc := range []struct{ in, field, lines string }{
		{"tenant-a", "tenant-a", "tenant-a"},
		{"a b\\c ≥ → é", "a b\\c ≥ → é", "a b\\c ≥ → é"},
		{"t\nFORGED 1 2 3", `t\x0aFORGED 1 2 3`, "t\nFORGED 1 2 3"},
		{"x\tz\r", `x\x09z\x0d`, "x\tz\\x0d"},
		{"\x1b[31mred\x07\x7f", `\x1b[31mred\x07\x7f`, `\x1b[31mred\x07\x7f`},
		{"evil\u202etxt.exe\u2028\u0085\u200b", `evil\u{202e}txt.exe\u{2028}\u{0085}\u{200b}`, `evil\u{202e}txt.exe\u{2028}\u{0085}\u{200b}`},
		{"bad\xffutf8", `bad\xffutf8`, `bad\xffutf8`},
	} {
		if got := Field(tc.in); got != tc.field {
			t.Errorf("Field(%q) = %q, want %q", tc.in, got, tc.field)
		}
		if got := Lines(tc.in); got != tc.lines {
			t.Errorf("Lines(%q) = %q, want %q", tc.in, got, tc.lines)
		}
	}
}
