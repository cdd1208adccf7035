package cmdkit

import (
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"reflect"
	"sync"

	"github.com/knowledgefs/kfsdb/cmd/kfsdb/escape"
)

// WriteJSON writes v as indented JSON, a command's --json output.
func WriteJSON(w io.Writer, v any) error {
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

// Write writes p to the underlying writer, one Write at a time.
func (s *syncWriter) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.w.Write(p)
}

// TermSafe returns w with every control character escaped
// (escape.Lines), so that text from workers and tenants (error messages,
// reasons, worker and tenant ids) cannot move the operator's cursor,
// retitle the terminal or hide lines: C0 controls but newline and tab
// (\x1b, \r, \b...), DEL, C1 controls (U+0080..U+009F), bidirectional
// overrides and other format characters, and invalid UTF-8 are written as
// \xNN or \u{NNNN}. It cannot tell a newline inside a value from the one
// that ends a line: the values themselves go through PrintRow, which
// escapes them with escape.Field. JSON output, whose encoder escapes C0
// controls itself, is unchanged but for C1 and format characters.
func TermSafe(w io.Writer) io.Writer { return termSafe{w} }

type termSafe struct{ w io.Writer }

// Write writes p with its control characters escaped; it reports all of
// p written.
func (t termSafe) Write(p []byte) (int, error) {
	if _, err := io.WriteString(t.w, escape.Lines(string(p))); err != nil {
		return 0, err
	}
	return len(p), nil
}

// PrintRow is how the commands print text from the database: a table
// row, a line of `attempts show`, a result. It is fmt.Fprintf with every
// argument that formats as text (a string or a type whose kind is string,
// a pointer to a string, a fmt.Stringer, an error) escaped with
// escape.Field first, so that a tenant id or an error message holding a
// newline stays one value on one line ("\x0a") and cannot forge a row,
// and padding (%-16s) counts the escaped text. A nil pointer prints "-".
func PrintRow(w io.Writer, format string, args ...any) {
	safe := make([]any, len(args))
	for i, a := range args {
		safe[i] = fieldArg(a)
	}
	fmt.Fprintf(w, format, safe...)
}

// fieldArg is a PrintRow argument, escaped when it formats as text; a
// nil pointer is "-".
func fieldArg(a any) any {
	rv := reflect.ValueOf(a)
	switch {
	case !rv.IsValid():
		return a
	case rv.Kind() == reflect.Pointer && rv.IsNil():
		return "-"
	}
	switch v := a.(type) {
	case *string:
		return escape.Field(*v)
	case error:
		return escape.Field(v.Error())
	case fmt.Stringer:
		return escape.Field(v.String())
	}
	if rv.Kind() == reflect.String {
		return escape.Field(rv.String())
	}
	return a
}

// NewLogger returns the commands' logger: WARN and above (INFO and above
// when verbose) to out as one text line per record, without times or stack
// traces. kfsdb-bench's work and relay, and the demo, log through it.
func NewLogger(out io.Writer, verbose bool) *slog.Logger {
	level := slog.LevelWarn
	if verbose {
		level = slog.LevelInfo
	}
	return slog.New(slog.NewTextHandler(out, &slog.HandlerOptions{
		Level: level,
		ReplaceAttr: func(groups []string, a slog.Attr) slog.Attr {
			if len(groups) == 0 && (a.Key == slog.TimeKey || a.Key == "stack") {
				return slog.Attr{}
			}
			return a
		},
	}))
}
