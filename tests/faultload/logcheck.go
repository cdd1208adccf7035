package faultload

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"

	"github.com/knowledgefs/kfsdb/repo"
)

// logCheck is a slog.Handler in front of the caller's logger that reads
// the errors the runtime (workers, sources, relay) logs at warning level
// and above: one repo.IsRetryable rejects and that reports no state is an
// error the runtime should not have met under a connection fault (a
// promoted standby's read-only error, a broken statement, …). The run
// cannot see those errors otherwise: the runtime retries or logs them.
type logCheck struct {
	next  slog.Handler
	state *logState
	attrs []slog.Attr
}

type logState struct {
	mu        sync.Mutex
	transient int64
	other     examples
}

func newLogCheck(next slog.Handler) *logCheck {
	return &logCheck{next: next, state: &logState{}}
}

func (h *logCheck) Enabled(ctx context.Context, l slog.Level) bool {
	return l >= slog.LevelWarn || h.next.Enabled(ctx, l)
}

func (h *logCheck) Handle(ctx context.Context, rec slog.Record) error {
	if rec.Level >= slog.LevelWarn {
		check := func(a slog.Attr) bool {
			if err, ok := a.Value.Any().(error); ok && a.Value.Kind() == slog.KindAny {
				h.state.add(rec.Message, err)
			}
			return true
		}
		for _, a := range h.attrs {
			check(a)
		}
		rec.Attrs(check)
	}
	if !h.next.Enabled(ctx, rec.Level) {
		return nil
	}
	return h.next.Handle(ctx, rec)
}

func (h *logCheck) WithAttrs(as []slog.Attr) slog.Handler {
	return &logCheck{next: h.next.WithAttrs(as), state: h.state, attrs: append(append([]slog.Attr(nil), h.attrs...), as...)}
}

func (h *logCheck) WithGroup(name string) slog.Handler {
	return &logCheck{next: h.next.WithGroup(name), state: h.state, attrs: h.attrs}
}

// add classifies one logged error: a state (a lost lease, a stale
// delivery) or the run's own stop is the runtime working as meant.
func (s *logState) add(msg string, err error) {
	if errors.Is(err, context.Canceled) || ReadsAsState(err) != nil {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if repo.IsRetryable(err) {
		s.transient++
		return
	}
	s.other.add(fmt.Sprintf("%s: %v", msg, err))
}
