package apiwalk_test

import (
	"context"
	"errors"
	"log/slog"
	"reflect"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/knowledgefs/kfsdb/kfstype"
	"github.com/knowledgefs/kfsdb/memqueue"
	"github.com/knowledgefs/kfsdb/observe"
	"github.com/knowledgefs/kfsdb/outcomes"
	"github.com/knowledgefs/kfsdb/pgsource"
	"github.com/knowledgefs/kfsdb/relay"
	"github.com/knowledgefs/kfsdb/repo"
	"github.com/knowledgefs/kfsdb/tests/apiwalk"
	"github.com/knowledgefs/kfsdb/tests/testfactory"
	"github.com/knowledgefs/kfsdb/worker"
)

// runtimeRules: every Config field has a default.
var runtimeRules = apiwalk.Rules{Defaults: map[string]bool{"Config": true}}

// refused: any non-nil error will do (memqueue, a test double, and
// observe return plain errors).
func refused(call func()) func(*testing.T, string, error) {
	call()
	return func(*testing.T, string, error) {}
}

// inputRefused: relay, worker and pgsource refuse bad input as repo does,
// with a *repo.InputError (errors.Is repo.ErrInvalidInput).
func inputRefused(call func()) func(*testing.T, string, error) {
	call()
	return func(t *testing.T, variant string, err error) {
		t.Helper()
		var ie *repo.InputError
		require.ErrorAs(t, err, &ie, variant)
		require.ErrorIs(t, err, repo.ErrInvalidInput, variant)
		require.NotEmpty(t, ie.Field, variant)
	}
}

func notRefused(t *testing.T, err error) {
	t.Helper()
	require.NotErrorIs(t, err, repo.ErrInvalidInput, "the valid call is refused as input")
}

// TestRuntimeAPIRefusesBadInput walks every exported function and method
// of packages relay, worker, pgsource, memqueue and observe (each list is
// checked against the package's source) with each argument nil or zero,
// typed nil interfaces, and malformed Config fields: none may panic, and
// each call with an error result must return one; relay, worker and
// pgsource a *repo.InputError, as repo does. The pool points at no server:
// nothing here may need one.
func TestRuntimeAPIRefusesBadInput(t *testing.T) {
	ctx := context.Background()
	canceled, cancel := context.WithCancel(ctx)
	cancel()
	pool, err := pgxpool.New(ctx, "postgres://nobody@127.0.0.1:1/none?connect_timeout=1")
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	quiet := slog.New(slog.DiscardHandler)
	q := memqueue.New()
	h := worker.HandlerFunc(func(context.Context, *worker.Job) error { return nil })
	rl, err := relay.New(pool, q, &relay.Config{PollOnly: true, Logger: quiet})
	require.NoError(t, err)
	w, err := worker.New(pool, q, h, &worker.Config{Logger: quiet, SingleCompletions: true})
	require.NoError(t, err)
	q.Inject(repo.Delivery{AttemptID: uuid.Must(uuid.NewV7()), QueueJobID: "job"})
	msg, err := q.Receive(ctx)
	require.NoError(t, err)
	q.Inject(repo.Delivery{})
	forged, err := q.Receive(ctx)
	require.NoError(t, err)
	// Process reports what it did in Result.Err.
	resultErr := func(out []reflect.Value) (error, bool) {
		res := out[0].Interface().(worker.Result)
		return res.Err, true
	}
	job := &worker.Job{}
	id, fp := uuid.Must(uuid.NewV7()), testfactory.Fingerprint("walk")

	t.Run("relay", func(t *testing.T) {
		apiwalk.Walk(t, "../../relay", map[string]apiwalk.Case{
			"New": {Fn: relay.New, Args: []any{pool, q, &relay.Config{Logger: quiet}}, Deep: []int{2},
				Valid: []string{"arg2=zero(*relay.Config)", "arg2=nil"}, SkipValidCall: true},
			"Relay.ID":          {Fn: (*relay.Relay).ID, Args: []any{rl}, Extra: map[string][]any{"zero Relay": {&relay.Relay{}}}},
			"Relay.Run":         {Fn: (*relay.Relay).Run, Args: []any{rl, canceled}, Extra: map[string][]any{"zero Relay": {&relay.Relay{}, canceled}}},
			"Relay.RunOnce":     {Fn: (*relay.Relay).RunOnce, Args: []any{rl, canceled}, Extra: map[string][]any{"zero Relay": {&relay.Relay{}, canceled}}},
			"Relay.TestSignals": {Fn: (*relay.Relay).TestSignals, Args: []any{rl}, Extra: map[string][]any{"zero Relay": {&relay.Relay{}}}},
		}, runtimeRules, inputRefused, notRefused)
	})

	t.Run("worker", func(t *testing.T) {
		apiwalk.Walk(t, "../../worker", map[string]apiwalk.Case{
			"New": {Fn: worker.New, Args: []any{pool, q, h, &worker.Config{Logger: quiet}}, Deep: []int{3},
				Valid: []string{"arg3=zero(*worker.Config)", "arg3=nil", "arg3.PendingDeliveryWait=-1ns"}, SkipValidCall: true},
			"Worker.ID":          {Fn: (*worker.Worker).ID, Args: []any{w}, Extra: map[string][]any{"zero Worker": {&worker.Worker{}}}},
			"Worker.Run":         {Fn: (*worker.Worker).Run, Args: []any{w, canceled}, Extra: map[string][]any{"zero Worker": {&worker.Worker{}, canceled}}},
			"Worker.TestSignals": {Fn: (*worker.Worker).TestSignals, Args: []any{w}, Extra: map[string][]any{"zero Worker": {&worker.Worker{}}}},
			// Not running: ErrNotRunning, which is not a refusal of input.
			"Worker.Stop": {Fn: (*worker.Worker).Stop, Args: []any{w, ctx}, Extra: map[string][]any{"zero Worker": {&worker.Worker{}, ctx}}},
			"Worker.StopAndCancel": {Fn: (*worker.Worker).StopAndCancel, Args: []any{w, ctx},
				Extra: map[string][]any{"zero Worker": {&worker.Worker{}, ctx}}},
			"Worker.LastStopReport": {Fn: (*worker.Worker).LastStopReport, Args: []any{w}},
			"Worker.EventsDropped":  {Fn: (*worker.Worker).EventsDropped, Args: []any{w}},
			"Worker.Process": {Fn: (*worker.Worker).Process, Args: []any{w, canceled, msg}, Err: resultErr,
				Extra: map[string][]any{"zero Worker": {&worker.Worker{}, canceled, msg}, "malformed delivery": {w, ctx, forged}}},
			"HandlerFunc.Work": {Fn: worker.HandlerFunc.Work, Args: []any{h, ctx, job},
				Valid: []string{"arg1=zero(context.Context)", "arg2=zero(*worker.Job)"}},
			"Error.Error":  {Fn: (*worker.Error).Error, Args: []any{worker.Fatal("E", errors.New("x"))}, Deep: []int{0}},
			"Error.Unwrap": {Fn: (*worker.Error).Unwrap, Args: []any{worker.Fatal("E", errors.New("x"))}, Deep: []int{0}, Unwrap: true},
			// Their error is what they make, not a refusal.
			"Retryable": {Fn: worker.Retryable, Args: []any{errors.New("x")}, Unwrap: true},
			"Fatal":     {Fn: worker.Fatal, Args: []any{"E", errors.New("x")}, Deep: []int{0}, Unwrap: true},
			// A Job is made by the worker; a zero one and a nil one refuse
			// every write.
			"Job.Lease":   {Fn: (*worker.Job).Lease, Args: []any{job}},
			"Job.Advance": {Fn: (*worker.Job).Advance, Args: []any{job, ctx, kfstype.CheckpointParsed}, SkipValidCall: true},
			"Job.AdvanceTo": {Fn: (*worker.Job).AdvanceTo, Args: []any{job, ctx, kfstype.CheckpointParsed},
				SkipValidCall: true},
			"Job.CompleteThrough": {Fn: (*worker.Job).CompleteThrough, Args: []any{job, id, fp}},
			"Job.BindCandidate": {Fn: (*worker.Job).BindCandidate, Args: []any{job, ctx, kfstype.CheckpointProjectionBuilt, id, fp},
				SkipValidCall: true},
		}, runtimeRules, inputRefused, notRefused)
	})

	t.Run("pgsource", func(t *testing.T) {
		src, err := pgsource.New(pool, &pgsource.Config{Logger: quiet})
		require.NoError(t, err)
		bound, err := pgsource.New(pool, &pgsource.Config{Logger: quiet})
		require.NoError(t, err)
		require.NoError(t, bound.Bind("walker", time.Minute, 4))
		apiwalk.Walk(t, "../../pgsource", map[string]apiwalk.Case{
			// Tenants holds an entry, so each malformed entry is tried.
			"New": {Fn: pgsource.New, Args: []any{pool, &pgsource.Config{Logger: quiet, Tenants: []string{"acme"}}}, Deep: []int{1},
				Valid: []string{"arg1=zero(*pgsource.Config)", "arg1=nil", "arg1.GatherWindow=-1ns"}, SkipValidCall: true,
				Extra: map[string][]any{
					"both lists":       {pool, &pgsource.Config{Logger: quiet, Tenants: []string{"a"}, ExcludeTenants: []string{"b"}}},
					"empty include":    {pool, &pgsource.Config{Logger: quiet, Tenants: []string{}}},
					"excluded twice":   {pool, &pgsource.Config{Logger: quiet, ExcludeTenants: []string{"a", "a"}}},
					"excluded invalid": {pool, &pgsource.Config{Logger: quiet, ExcludeTenants: []string{"\xff"}}},
				}},
			"Source.Bind": {Fn: (*pgsource.Source).Bind, Args: []any{src, "walker", time.Minute, 4}, SkipValidCall: true,
				Extra: map[string][]any{"zero Source": {&pgsource.Source{}, "walker", time.Minute, 4}, "bound twice": {bound, "other", time.Minute, 4}}},
			"Source.Receive": {Fn: (*pgsource.Source).Receive, Args: []any{bound, canceled}, SkipValidCall: true,
				Extra: map[string][]any{"zero Source": {&pgsource.Source{}, canceled}}},
			"Source.Run": {Fn: (*pgsource.Source).Run, Args: []any{bound, canceled}, SkipValidCall: true,
				Extra: map[string][]any{"zero Source": {&pgsource.Source{}, canceled}}},
		}, runtimeRules, inputRefused, notRefused)
	})

	t.Run("outcomes", func(t *testing.T) {
		apiwalk.Walk(t, "../../outcomes", map[string]apiwalk.Case{
			// The valid calls reach for the server, which is not there.
			"Enable":  {Fn: outcomes.Enable, Args: []any{ctx, pool, time.Second}, Valid: []string{"arg2=zero(time.Duration)"}},
			"Disable": {Fn: outcomes.Disable, Args: []any{ctx, pool, time.Second}, Valid: []string{"arg2=zero(time.Duration)"}},
			"Enabled": {Fn: outcomes.Enabled, Args: []any{ctx, pool}},
			"Listen": {Fn: outcomes.Listen, Args: []any{canceled, pool, func(outcomes.Outcome) {}, &outcomes.ListenConfig{}},
				Valid: []string{"arg3=nil", "arg3=zero(*outcomes.ListenConfig)"}},
			"PayloadError.Error": {Fn: (*outcomes.PayloadError).Error, Args: []any{&outcomes.PayloadError{Payload: "x", Reason: "y"}}},
			// Its error describes a payload (a *PayloadError, outcomes'
			// TestParse), not a refused argument: only a panic fails here.
			"Parse": {Fn: outcomes.Parse, Args: []any{`{"attempt_id": "` + id.String() + `", "tenant_id": "t", "run_state": "failed"}`}, Unwrap: true},
		}, apiwalk.Rules{}, inputRefused, notRefused)
	})

	t.Run("memqueue", func(t *testing.T) {
		var nilQ *memqueue.Queue
		apiwalk.Walk(t, "../../memqueue", map[string]apiwalk.Case{
			"New":             {Fn: memqueue.New},
			"Queue.SetOutage": {Fn: (*memqueue.Queue).SetOutage, Args: []any{memqueue.New(), false}},
			"Queue.Stats":     {Fn: (*memqueue.Queue).Stats, Args: []any{memqueue.New()}},
			"Queue.Len":       {Fn: (*memqueue.Queue).Len, Args: []any{memqueue.New()}},
			"Queue.Inject":    {Fn: (*memqueue.Queue).Inject, Args: []any{memqueue.New(), repo.Delivery{AttemptID: id, QueueJobID: "j"}}},
			"Queue.Publish": {Fn: (*memqueue.Queue).Publish, Args: []any{memqueue.New(), ctx, &relay.Message{AttemptID: id}},
				Extra: map[string][]any{"nil queue": {nilQ, ctx, &relay.Message{AttemptID: id}}}},
			"Queue.Receive": {Fn: (*memqueue.Queue).Receive, Args: []any{memqueue.New(), canceled},
				Extra: map[string][]any{"nil queue": {nilQ, canceled}}},
		}, runtimeRules, refused, notRefused)
	})

	t.Run("observe", func(t *testing.T) {
		apiwalk.Walk(t, "../../observe", map[string]apiwalk.Case{
			"Discard.Add":     {Fn: observe.Discard.Add, Args: []any{observe.Discard{}, observe.Claimed, int64(1)}},
			"Counts.Add":      {Fn: (*observe.Counts).Add, Args: []any{&observe.Counts{}, observe.Claimed, int64(1)}},
			"Counts.Get":      {Fn: (*observe.Counts).Get, Args: []any{&observe.Counts{}, observe.Claimed}},
			"Counts.Snapshot": {Fn: (*observe.Counts).Snapshot, Args: []any{&observe.Counts{}}},
			"Counters":        {Fn: observe.Counters},
			"Histograms":      {Fn: observe.Histograms},
			"QueryName":       {Fn: observe.QueryName, Args: []any{"-- name: StartAttempt :one"}},
		}, runtimeRules, refused, notRefused)
	})

	// A malformed delivery (forged, or corrupted by the broker) can never
	// be leased: it is acknowledged as stale, not handed back to loop.
	q2 := memqueue.New()
	q2.Inject(repo.Delivery{QueueJobID: "\xff"})
	bad, err := q2.Receive(ctx)
	require.NoError(t, err)
	res := w.Process(ctx, bad)
	require.Equal(t, worker.OutcomeStale, res.Outcome, "%v", res.Err)
	require.ErrorIs(t, res.Err, repo.ErrInvalidInput)
	_, acked, _ := q2.Stats()
	require.EqualValues(t, 1, acked)
	require.Zero(t, q2.Len(), "handed back")
}
