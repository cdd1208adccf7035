package cli

import (
	"io"
	"log/slog"
	"sync"
)

// NewLogger returns the commands' logger: WARN and above (INFO and above
// when verbose) to out as one text line per record, without times or stack
// traces. The demo (tests/cmd/kfsdb-demo) logs through it too.
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
