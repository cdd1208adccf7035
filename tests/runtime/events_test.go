package runtime_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/knowledgefs/kfsdb/kfstype"
	"github.com/knowledgefs/kfsdb/observe"
	"github.com/knowledgefs/kfsdb/pgsource"
	"github.com/knowledgefs/kfsdb/tests/testfactory"
	"github.com/knowledgefs/kfsdb/worker"
)

func TestOutcomeEvents(t *testing.T) {
	t.Parallel()

	// Two workers on one channel, one completing in batches and one
	// statement by statement; a third of the attempts complete, a third
	// fail, a third are retried once and then exhausted. Each lease the
	// database recorded ends in exactly one event, with the outcome, code
	// and tenant the database holds. Mutations: the completer not
	// reporting its outcomes (completions missing); finish called twice
	// for a slot's result (duplicates).
	t.Run("EveryRecordedOutcomeArrivesOnce", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t, 24)
		ctx, pool := e.ctx, e.pool
		testfactory.InstallLeaseAudit(ctx, t, pool)
		docs, attempts := e.start(t, 2, 6, 2)
		cands := testfactory.Candidates(docs)
		kind := map[uuid.UUID]int{}
		for i, a := range attempts {
			kind[a.ID] = i % 3
		}
		h := worker.HandlerFunc(func(ctx context.Context, job *worker.Job) error {
			switch kind[job.Attempt.ID] {
			case 0:
				return testfactory.CompileJob(ctx, job, cands[job.Attempt.KnowledgeSpaceID], nil)
			case 1:
				return worker.Fatal("BROKEN", errors.New("broken document"))
			}
			return worker.Retryable(errors.New("try again"))
		})
		events := make(chan worker.Event, 4*len(attempts))
		cfg := worker.Config{Concurrency: 3, Events: events, RetryBackoffBase: time.Millisecond, RetryBackoffCap: time.Millisecond}
		w1 := e.directWorker(t, h, pgsource.Config{}, cfg)
		cfg.SingleCompletions = true
		w2 := e.directWorker(t, h, pgsource.Config{}, cfg)
		stop := testfactory.RunAll(ctx, t, w1.Run, w2.Run)
		waitAllEnded(ctx, t, pool, attemptIDs(attempts), time.Minute)
		stop() // Run has returned: every event is in the channel
		close(events)

		got := map[uuid.UUID][]worker.Event{}
		for ev := range events {
			got[ev.AttemptID] = append(got[ev.AttemptID], ev)
		}
		leases := testfactory.ReadLeaseIntervals(ctx, t, pool)
		for _, a := range attempts {
			evs := got[a.ID]
			require.Len(t, evs, len(leases[a.ID]), "attempt %s: one event per lease: %v", a.ID, evs)
			var want []worker.Outcome
			var codes []string
			switch kind[a.ID] {
			case 0:
				want, codes = []worker.Outcome{worker.OutcomeCompleted}, []string{""}
			case 1:
				want, codes = []worker.Outcome{worker.OutcomeFailed}, []string{"BROKEN"}
			case 2:
				want = []worker.Outcome{worker.OutcomeRetried, worker.OutcomeExhausted}
				codes = []string{kfstype.ErrorCodeCompilationRetryable, kfstype.ErrorCodeExecutionAttemptsExhausted}
			}
			// Not in order: a retry's event and the next lease's outcome
			// are sent by different slots after their commits.
			type oc struct {
				outcome worker.Outcome
				code    string
			}
			require.Len(t, evs, len(want), "attempt %s: %v", a.ID, evs)
			var gotOC, wantOC []oc
			for i, ev := range evs {
				gotOC = append(gotOC, oc{ev.Outcome, ev.ErrorCode})
				wantOC = append(wantOC, oc{want[i], codes[i]})
				require.Equal(t, a.TenantID, ev.TenantID)
				require.False(t, ev.LeaseLost)
				require.Positive(t, ev.HandlerDuration)
			}
			require.ElementsMatch(t, wantOC, gotOC, "attempt %s", a.ID)
			rows := testfactory.RequireInvariants(ctx, t, pool, a.ID)
			require.Equal(t, new(codes[len(codes)-1]), nilIfEmpty(rows.Attempt.LastErrorCode), "the last event's code is the one recorded")
		}
		require.Len(t, got, len(attempts))
		require.Zero(t, w1.EventsDropped()+w2.EventsDropped())
	})

	// Nobody reads an unbuffered channel: every send finds it full. The
	// attempts all end (a blocking send would hold the completer after
	// its first commit, and every slot behind it), and each event is
	// counted as dropped, by the worker and by its metrics. Mutation: a
	// blocking send stalls the run.
	t.Run("AFullChannelDropsAndCountsWithoutBlocking", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t, 16)
		ctx, pool := e.ctx, e.pool
		docs, attempts := e.start(t, 1, 6, 0)
		var runs sync.Map
		var counts observe.Counts
		w := e.directWorker(t, compileHandler(testfactory.Candidates(docs), &runs), pgsource.Config{},
			worker.Config{Concurrency: 3, Events: make(chan worker.Event), Metrics: &counts})
		stop := testfactory.RunAll(ctx, t, w.Run)
		waitAllEnded(ctx, t, pool, attemptIDs(attempts), time.Minute)
		stop()
		require.EqualValues(t, len(attempts), w.EventsDropped())
		require.EqualValues(t, len(attempts), counts.Get(observe.EventsDropped))
		require.EqualValues(t, len(attempts), counts.Get(observe.Completed))
	})
}

// nilIfEmpty is a stored error code as an event carries it ("" for none).
func nilIfEmpty(code *string) *string {
	if code == nil {
		return new("")
	}
	return code
}
