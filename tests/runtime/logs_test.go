package runtime_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/knowledgefs/kfsdb/kfstype"
	"github.com/knowledgefs/kfsdb/pgsource"
	"github.com/knowledgefs/kfsdb/relay"
	"github.com/knowledgefs/kfsdb/tests/testfactory"
	"github.com/knowledgefs/kfsdb/worker"
)

// logRecord is one JSON line of the runtime's logs.
type logRecord map[string]any

func (r logRecord) str(k string) string { s, _ := r[k].(string); return s }

// parseLogs decodes every line of out; a line that is not JSON fails t.
func parseLogs(t *testing.T, out string) []logRecord {
	t.Helper()
	var recs []logRecord
	sc := bufio.NewScanner(strings.NewReader(out))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		var r logRecord
		require.NoError(t, json.Unmarshal(sc.Bytes(), &r), "log line %q", sc.Text())
		recs = append(recs, r)
	}
	require.NoError(t, sc.Err())
	return recs
}

// TestLogs runs attempts that succeed and fail through both deliveries
// with DEBUG logs on, and checks the logging contract: one line per state
// change at DEBUG and per failure at WARN, each naming the attempt, its
// tenant and the worker; no payload and no lease token in any line.
func TestLogs(t *testing.T) {
	t.Parallel()
	for _, delivery := range []string{"postgres", "relay"} {
		t.Run(delivery, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, 16)
			var out testfactory.SyncBuffer
			log := slog.New(slog.NewJSONHandler(&out, &slog.HandlerOptions{Level: slog.LevelDebug}))

			docs, attempts := e.start(t, 2, 6, 0)
			failing := map[uuid.UUID]bool{}
			for i, a := range attempts {
				if i%4 == 0 {
					failing[a.ID] = true
				}
			}
			cands := testfactory.Candidates(docs)
			h := worker.HandlerFunc(func(ctx context.Context, job *worker.Job) error {
				if failing[job.Attempt.ID] {
					return worker.Fatal("DOCUMENT_UNPARSABLE", errors.New("the document is unparsable"))
				}
				return testfactory.CompileJob(ctx, job, cands[job.Attempt.KnowledgeSpaceID], nil)
			})
			var runs []func(context.Context) error
			var w *worker.Worker
			if delivery == "postgres" {
				w = e.directWorker(t, h, pgsource.Config{Logger: log}, worker.Config{Concurrency: 4, Logger: log})
			} else {
				runs = append(runs, e.relay(t, relay.Config{Logger: log}).Run)
				w = e.worker(t, h, worker.Config{Concurrency: 4, Logger: log})
			}
			ctx, pool := e.ctx, e.pool
			stop := testfactory.RunAll(ctx, t, append(runs, w.Run)...)
			waitAllEnded(ctx, t, pool, attemptIDs(attempts), 30*time.Second)
			stop()

			recs := parseLogs(t, out.String())
			type seen struct{ running, succeeded, failed int }
			per := map[string]*seen{}
			for _, a := range attempts {
				per[a.ID.String()] = &seen{}
			}
			for _, r := range recs {
				for k, v := range r {
					s, _ := v.(string)
					require.NotContains(t, strings.ToLower(k), "token", "a log attribute names a token: %v", r)
					require.NotContains(t, s, "attemptId", "a log line carries the payload: %v", r)
				}
				s := per[r.str("attempt_id")]
				switch r.str("msg") {
				case "attempt running":
					s.running++
				case "attempt succeeded":
					s.succeeded++
				case "attempt failed":
					s.failed++
				default:
					continue
				}
				require.Equal(t, w.ID(), r.str("worker"), "%v", r)
				require.NotEmpty(t, r.str("tenant_id"), "%v", r)
			}
			for _, a := range attempts {
				s := per[a.ID.String()]
				require.Equal(t, 1, s.running, "attempt %s: running lines", a.ID)
				rows := testfactory.RequireInvariants(ctx, t, pool, a.ID)
				if failing[a.ID] {
					require.Equal(t, kfstype.RunStateFailed, rows.Attempt.RunState)
					require.Equal(t, seen{1, 0, 1}, *s, "attempt %s", a.ID)
				} else {
					require.Equal(t, kfstype.RunStateSucceeded, rows.Attempt.RunState)
					require.Equal(t, seen{1, 1, 0}, *s, "attempt %s", a.ID)
				}
			}
			for _, r := range recs {
				switch r.str("msg") {
				case "attempt running", "attempt succeeded", "attempt leased", "outbox row published":
					require.Equal(t, "DEBUG", r.str("level"), "%v", r)
				case "attempt failed":
					require.Equal(t, "WARN", r.str("level"), "%v", r)
					require.Contains(t, r.str("err"), "DOCUMENT_UNPARSABLE", "%v", r)
				}
			}
		})
	}
}
