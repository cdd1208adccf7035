// Package runcfg gives the relay and the worker the defaults of the
// configuration fields they share (ID, Logger, Metrics, Repo), written once
// so that the two cannot drift apart.
package runcfg

import (
	"fmt"
	"log/slog"
	"os"

	"github.com/google/uuid"

	"github.com/knowledgefs/kfsdb/observe"
	"github.com/knowledgefs/kfsdb/repo"
)

// ID returns id, or when it is empty one made of kind, the host, the
// process id and a random suffix: unique per instance, and a reader of the
// claim and lease columns can tell which process wrote them.
func ID(id, kind string) string {
	if id != "" {
		return id
	}
	host, _ := os.Hostname()
	return fmt.Sprintf("%s-%s-%d-%s", kind, host, os.Getpid(), uuid.NewString()[:8])
}

// Logger returns l, or slog's default logger when l is nil.
func Logger(l *slog.Logger) *slog.Logger {
	if l == nil {
		return slog.Default()
	}
	return l
}

// Metrics returns m, or observe.Discard when m is nil. A typed nil is kept,
// for the component's validation to refuse.
func Metrics(m observe.Metrics) observe.Metrics {
	if m == nil {
		return observe.Discard{}
	}
	return m
}

// Repo returns r, or a repo with the default configuration when r is nil.
func Repo(r *repo.Repo) *repo.Repo {
	if r == nil {
		return repo.New(nil)
	}
	return r
}
