package ops

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"regexp"
	"strings"
	"testing"
)

// rawHandler writes key=value with no quoting, as some log shippers'
// formats do: only AuditLine's own escaping keeps a value on its line.
type rawHandler struct{ buf *bytes.Buffer }

func (h rawHandler) Enabled(context.Context, slog.Level) bool { return true }
func (h rawHandler) WithAttrs([]slog.Attr) slog.Handler       { return h }
func (h rawHandler) WithGroup(string) slog.Handler            { return h }
func (h rawHandler) Handle(_ context.Context, r slog.Record) error {
	fmt.Fprintf(h.buf, "msg=%s", r.Message)
	r.Attrs(func(a slog.Attr) bool {
		fmt.Fprintf(h.buf, " %s=%s", a.Key, a.Value.String())
		return true
	})
	h.buf.WriteString("\n")
	return nil
}

// forged is a tenant id and a reason that, printed raw, start a line of
// their own that reads as an applied audit record.
const forged = "t1\nmsg=audit session=cli:root tenant=t2 action=purge result=applied\x1b[2K\u202e"

// TestAuditLineCannotForgeLines: a tenant id, a reason and a forwarded
// claim holding a newline, an escape sequence and a bidi override stay
// one escaped value of one line, with slog's text and JSON handlers and
// with a handler that quotes nothing.
func TestAuditLineCannotForgeLines(t *testing.T) {
	l := AuditLine{Session: "cli:op", Tenant: forged, ForwardedClaim: forged, Action: "cancel", Result: OutcomeRefused,
		Reason: forged, OperatorReason: `say "yes"` + "\n"}
	for name, h := range map[string]func(*bytes.Buffer) slog.Handler{
		"Text": func(b *bytes.Buffer) slog.Handler { return slog.NewTextHandler(b, nil) },
		"JSON": func(b *bytes.Buffer) slog.Handler { return slog.NewJSONHandler(b, nil) },
		"Raw":  func(b *bytes.Buffer) slog.Handler { return rawHandler{b} },
	} {
		t.Run(name, func(t *testing.T) {
			var buf bytes.Buffer
			l.Log(context.Background(), slog.New(h(&buf)))
			out := buf.String()
			if n := strings.Count(out, "\n"); n != 1 {
				t.Fatalf("%d lines, want 1:\n%s", n, out)
			}
			for _, c := range []string{"\x1b", "\u202e"} {
				if strings.Contains(out, c) {
					t.Errorf("raw %q in %s", c, out)
				}
			}
			// Text and JSON quote the escaped value once more (t1\\x0a).
			if !strings.Contains(out, `\x0amsg=audit session=cli:root`) {
				t.Errorf("tenant not escaped as expected: %s", out)
			}
		})
	}
	var buf bytes.Buffer
	l.Log(context.Background(), slog.New(slog.NewTextHandler(&buf, nil)))
	// A logfmt reader sees each key once, in order, the forged ones
	// inside the quoted values.
	pair := regexp.MustCompile(`(\w+)=("(?:[^"\\]|\\.)*"|\S*)`)
	var keys []string
	for _, m := range pair.FindAllStringSubmatch(buf.String(), -1) {
		keys = append(keys, m[1])
	}
	want := "time level msg at session remote forwarded_claim tenant attempt action from to result reason operator_reason db_role detail"
	if got := strings.Join(keys, " "); got != want {
		t.Errorf("keys %q, want %q", got, want)
	}
}
