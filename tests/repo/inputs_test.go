package repo_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/knowledgefs/kfsdb/kfstype"
	"github.com/knowledgefs/kfsdb/repo"
	"github.com/knowledgefs/kfsdb/tests/apiwalk"
	"github.com/knowledgefs/kfsdb/tests/testfactory"
)

// inputRules: the fields whose zero value is a default, and the strings
// that are cut and cleaned rather than refused.
var inputRules = apiwalk.Rules{
	Optional: map[string]bool{
		"StartParams.AvailableAt": true, "StartParams.MaxExecutionAttempts": true,
		"AttemptRef.ExpectedRowVersion": true, "CancelParams.Reason": true, "SupersedeParams.Reason": true,
		"PurgeParams.BatchSize": true, "Delivery.ExternalJobID": true, "AcquireLeaseParams.LeaseDuration": true,
		"HeartbeatParams.LeaseDuration": true, "ClaimOutboxParams.LockDuration": true, "Dispatch.ExternalJobID": true,
		"MarkDispatchedParams.VisibilityTimeout": true, "ReleaseOutboxParams.MaxDispatchAttempts": true,
		"FetchLeasesParams.LeaseDuration": true, "FetchLeasesParams.AfterTenant": true,
		"FetchLeasesParams.MaxTenants": true, "FetchLeasesParams.PerTenant": true,
		"FetchLeasesParams.Tenants": true, "FetchLeasesParams.ExcludeTenants": true,
		"ListAttemptsParams.KnowledgeSpaceID": true, "ListAttemptsParams.After": true,
		"ListAttemptsParams.OlderThan": true, "ListAttemptsParams.NewerThan": true, "ListAttemptsParams.LastErrorCode": true, "AttemptCursor.CompletedAt": true,
		"CountAttemptsParams.Cap": true, "OutboxBacklogParams.Cap": true, "ListStuckParams.PendingOverdue": true,
		"ThroughputParams.Minutes": true, "ThroughputParams.Cap": true,
		"PurgeTenantsParams.AfterTenant": true, "PurgeTenantsParams.Limit": true,
		"PauseTenantParams.Reason": true,
	},
	Sanitized: map[string]bool{
		"CancelParams.Reason": true, "SupersedeParams.Reason": true, "FailParams.ErrorMessage": true,
		"ScheduleRetryParams.ErrorMessage": true, "ReleaseOutboxParams.LastError": true, "PauseTenantParams.Reason": true,
	},
	Unchecked: map[string]bool{"Lease.ExpiresAt": true, "Lease.LocalDeadline": true},
}

// TestEveryExportedFunctionRefusesBadInput walks every exported function
// and method of package repo (the list is checked against the package's
// source, so a new one without a case fails) with each argument nil or
// zero and each field of its parameters nil, zero or malformed (empty,
// invalid UTF-8, NUL, over-long strings, zero UUIDs, negative numbers and
// durations, timestamps PostgreSQL cannot store). Each variant must
// return an *InputError without a round trip (no statement sent) and
// never panic; a function without an error result must not panic. Every
// valid call is made too (it must not be refused as input), and no row
// of either table changes.
func TestEveryExportedFunctionRefusesBadInput(t *testing.T) {
	b := setup(t)
	ctx := b.ctx
	// Rows in several states, none of them due at the repo's clock, so a
	// valid call (a claim) finds nothing to change either.
	deferred := b.scope(t).StartParams()
	deferred.Deferred = true
	_, err := b.repo.Start(ctx, b.db.Pool, deferred)
	require.NoError(t, err)
	_, _, _ = b.drv.Running(ctx, t, b.scope(t), nil)
	queued := b.scope(t)
	b.drv.Dispatch(ctx, t, b.drv.Start(ctx, t, queued, nil).ID, nil)
	_, failLease, _ := b.drv.Running(ctx, t, b.scope(t), nil)
	_, err = b.repo.Fail(ctx, b.db.Pool, &repo.FailParams{Lease: failLease, ErrorCode: "E", ErrorMessage: "m"})
	require.NoError(t, err)

	cfg, err := pgxpool.ParseConfig(b.db.URL)
	require.NoError(t, err)
	counter := &statementCounter{}
	cfg.ConnConfig.Tracer = counter
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	// Prepare's connection, from the counted pool: a refused call must
	// send nothing on it either.
	conn, err := pool.Acquire(ctx)
	require.NoError(t, err)
	t.Cleanup(conn.Release)
	before := snapshotTables(ctx, t, b.db.Pool)

	r := b.repo
	id := func() uuid.UUID { return uuid.Must(uuid.NewV7()) }
	str := func(s string) *string { return &s }
	fp := testfactory.Fingerprint("walk")
	cand := id()
	lease := func() *repo.Lease {
		return &repo.Lease{AttemptID: id(), WorkerID: "worker", Token: id(), ExpiresAt: time.Now()}
	}
	ref := func() repo.AttemptRef {
		return repo.AttemptRef{TenantID: "tenant", KnowledgeSpaceID: id(), AttemptID: id(), ExpectedRowVersion: new(int32)}
	}
	start := func() *repo.StartParams {
		return &repo.StartParams{TenantID: "tenant", KnowledgeSpaceID: id(), DocumentAssetID: id(), DocumentVersion: 1,
			PublicationGenerationID: id(), MaxExecutionAttempts: 3}
	}
	delayed := start()
	delayed.AvailableAt = new(time.Now().Add(time.Hour))
	delivery := func() repo.Delivery {
		return repo.Delivery{AttemptID: id(), QueueJobID: "job", ExternalJobID: str("ext")}
	}
	entry := func() repo.CompleteManyEntry {
		return repo.CompleteManyEntry{Lease: lease(), Through: true, CandidatePublicationID: &cand, CandidateFingerprint: &fp}
	}
	pgErr := &pgconn.PgError{Code: "23505", ConstraintName: "c", Message: "duplicate"}

	cases := map[string]apiwalk.Case{
		"New":                 {Fn: repo.New, Args: []any{&repo.Config{}}, Valid: []string{"arg0=zero(*repo.Config)"}},
		"TruncateMessage":     {Fn: repo.TruncateMessage, Args: []any{"boom"}, Deep: []int{0}},
		"TruncateErrorCode":   {Fn: repo.TruncateErrorCode, Args: []any{"E"}, Deep: []int{0}},
		"ValidateWorkerID":    {Fn: repo.ValidateWorkerID, Args: []any{"worker"}, Deep: []int{0}},
		"ValidateJobID":       {Fn: repo.ValidateJobID, Args: []any{"job"}, Deep: []int{0}},
		"ValidateFingerprint": {Fn: repo.ValidateFingerprint, Args: []any{fp}, Deep: []int{0}},
		"IsRetryable":         {Fn: repo.IsRetryable, Args: []any{errors.New("x")}},
		"DecodePayload":       {Fn: repo.DecodePayload, Args: []any{[]byte(`{"attemptId":"` + id().String() + `"}`)}, Deep: []int{0}},
		"RegisterTypes":       {Fn: repo.RegisterTypes, Args: []any{pgtype.NewMap()}},

		"InputError.Error":        {Fn: (*repo.InputError).Error, Args: []any{&repo.InputError{Field: "f", Reason: "r"}}},
		"InputError.Is":           {Fn: (*repo.InputError).Is, Args: []any{&repo.InputError{}, repo.ErrInvalidInput}},
		"TransitionError.Error":   {Fn: (*repo.TransitionError).Error, Args: []any{&repo.TransitionError{Transition: "t", Reason: "r"}}},
		"TransitionError.Is":      {Fn: (*repo.TransitionError).Is, Args: []any{&repo.TransitionError{}, repo.ErrInvalidTransition}},
		"HeadConflictError.Error": {Fn: (*repo.HeadConflictError).Error, Args: []any{&repo.HeadConflictError{Expected: 1}}},
		"HeadConflictError.Is":    {Fn: (*repo.HeadConflictError).Is, Args: []any{&repo.HeadConflictError{}, repo.ErrHeadConflict}},
		"ConstraintError.Error":   {Fn: (*repo.ConstraintError).Error, Args: []any{&repo.ConstraintError{Err: pgErr}}, Deep: []int{0}},
		"ConstraintError.Is":      {Fn: (*repo.ConstraintError).Is, Args: []any{&repo.ConstraintError{}, repo.ErrConstraint}},
		"ConstraintError.Unwrap": {Fn: (*repo.ConstraintError).Unwrap, Args: []any{&repo.ConstraintError{Err: pgErr}},
			Deep: []int{0}, Unwrap: true},

		"Repo.Prepare":         {Fn: (*repo.Repo).Prepare, Args: []any{r, ctx, conn.Conn()}},
		"Repo.Start":           {Fn: (*repo.Repo).Start, Args: []any{r, ctx, pool, delayed}, Deep: []int{3}},
		"Repo.StartMany":       {Fn: (*repo.Repo).StartMany, Args: []any{r, ctx, pool, &repo.StartManyParams{Starts: []*repo.StartParams{start(), start()}}}, Deep: []int{3}},
		"Repo.ReleaseDeferred": {Fn: (*repo.Repo).ReleaseDeferred, Args: []any{r, ctx, pool, &repo.ReleaseDeferredParams{AttemptRef: ref()}}, Deep: []int{3}},
		"Repo.Cancel":          {Fn: (*repo.Repo).Cancel, Args: []any{r, ctx, pool, &repo.CancelParams{AttemptRef: ref(), Reason: str("why")}}, Deep: []int{3}},
		"Repo.Supersede":       {Fn: (*repo.Repo).Supersede, Args: []any{r, ctx, pool, &repo.SupersedeParams{AttemptRef: ref(), Reason: str("why")}}, Deep: []int{3}},
		"Repo.RetryFailed":     {Fn: (*repo.Repo).RetryFailed, Args: []any{r, ctx, pool, &repo.RetryFailedParams{AttemptRef: ref()}}, Deep: []int{3}},
		"Repo.Purge": {Fn: (*repo.Repo).Purge, Args: []any{r, ctx, pool, &repo.PurgeParams{TenantID: "tenant",
			CompletedBefore: time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC), BatchSize: 10}}, Deep: []int{3}},
		"Repo.PurgeTenants": {Fn: (*repo.Repo).PurgeTenants, Args: []any{r, ctx, pool, &repo.PurgeTenantsParams{
			CompletedBefore: time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC), AfterTenant: "tenant", Limit: 10}}, Deep: []int{3}},
		"Repo.AcquireLease": {Fn: (*repo.Repo).AcquireLease, Args: []any{r, ctx, pool, &repo.AcquireLeaseParams{Delivery: delivery(),
			WorkerID: "worker", LeaseDuration: time.Minute}}, Deep: []int{3}},
		"Repo.FailExhausted": {Fn: (*repo.Repo).FailExhausted, Args: []any{r, ctx, pool, &repo.FailExhaustedParams{Delivery: delivery()}}, Deep: []int{3}},
		"Repo.Heartbeat": {Fn: (*repo.Repo).Heartbeat, Args: []any{r, ctx, pool, &repo.HeartbeatParams{Lease: lease(),
			LeaseDuration: time.Minute}}, Deep: []int{3}},
		"Repo.Advance": {Fn: (*repo.Repo).Advance, Args: []any{r, ctx, pool, &repo.AdvanceParams{Lease: lease(),
			Checkpoint: kfstype.CheckpointParsed, CandidatePublicationID: &cand, CandidateFingerprint: &fp}}, Deep: []int{3}},
		"Repo.AdvanceTo": {Fn: (*repo.Repo).AdvanceTo, Args: []any{r, ctx, pool, &repo.AdvanceToParams{Lease: lease(),
			Checkpoint: kfstype.CheckpointParsed, CandidatePublicationID: &cand, CandidateFingerprint: &fp}}, Deep: []int{3}},
		"Repo.Complete": {Fn: (*repo.Repo).Complete, Args: []any{r, ctx, pool, &repo.CompleteParams{Lease: lease()}}, Deep: []int{3}},
		"Repo.CompleteThrough": {Fn: (*repo.Repo).CompleteThrough, Args: []any{r, ctx, pool, &repo.CompleteThroughParams{Lease: lease(),
			CandidatePublicationID: &cand, CandidateFingerprint: &fp}}, Deep: []int{3}},
		"Repo.Fail": {Fn: (*repo.Repo).Fail, Args: []any{r, ctx, pool, &repo.FailParams{Lease: lease(), ErrorCode: "E",
			ErrorMessage: "m"}}, Deep: []int{3}},
		"Repo.ScheduleRetry": {Fn: (*repo.Repo).ScheduleRetry, Args: []any{r, ctx, pool, &repo.ScheduleRetryParams{Lease: lease(),
			RetryDelay: time.Second, ErrorCode: "E", ErrorMessage: "m"}}, Deep: []int{3}},
		"Repo.CompleteMany": {Fn: (*repo.Repo).CompleteMany, Args: []any{r, ctx, pool, &repo.CompleteManyParams{Entries: []repo.CompleteManyEntry{entry(), entry()}}}, Deep: []int{3}},
		// Tenants holds an entry, so each malformed entry is tried.
		"Repo.FetchLeases": {Fn: (*repo.Repo).FetchLeases, Args: []any{r, ctx, pool, &repo.FetchLeasesParams{WorkerID: "worker", BatchSize: 1,
			Tenants: []string{"tenant"}}}, Deep: []int{3}, Extra: map[string][]any{
			"both lists":        {r, ctx, pool, &repo.FetchLeasesParams{WorkerID: "worker", BatchSize: 1, Tenants: []string{"a"}, ExcludeTenants: []string{"b"}}},
			"excluded twice":    {r, ctx, pool, &repo.FetchLeasesParams{WorkerID: "worker", BatchSize: 1, ExcludeTenants: []string{"a", "a"}}},
			"excluded NUL":      {r, ctx, pool, &repo.FetchLeasesParams{WorkerID: "worker", BatchSize: 1, ExcludeTenants: []string{"a\x00b"}}},
			"empty include":     {r, ctx, pool, &repo.FetchLeasesParams{WorkerID: "worker", BatchSize: 1, Tenants: []string{}}},
			"included too long": {r, ctx, pool, &repo.FetchLeasesParams{WorkerID: "worker", BatchSize: 1, Tenants: []string{strings.Repeat("é", 256)}}},
		}},
		// nil: every tenant (not refused); an empty include list is.
		"ValidateTenantLists": {Fn: repo.ValidateTenantLists, Args: []any{[]string{"tenant"}, []string(nil)}, Deep: []int{0, 1},
			Valid: []string{"arg0=zero([]string)", "arg0=nil", "arg1=nil", "arg1=empty"}},
		"Repo.ClaimOutbox": {Fn: (*repo.Repo).ClaimOutbox, Args: []any{r, ctx, pool, &repo.ClaimOutboxParams{RelayID: "relay",
			BatchSize: 10, LockDuration: time.Minute}}, Deep: []int{3}},
		"Repo.MarkDispatched": {Fn: (*repo.Repo).MarkDispatched, Args: []any{r, ctx, pool, &repo.MarkDispatchedParams{
			Dispatches:        []repo.Dispatch{{OutboxID: id(), LockToken: id(), QueueJobID: "job", ExternalJobID: str("ext")}},
			VisibilityTimeout: time.Minute}}, Deep: []int{3}},
		"Repo.ReleaseOutbox": {Fn: (*repo.Repo).ReleaseOutbox, Args: []any{r, ctx, pool, &repo.ReleaseOutboxParams{OutboxID: id(),
			LockToken: id(), Backoff: time.Second, MaxDispatchAttempts: 3, LastError: "down"}}, Deep: []int{3}},
		"Repo.OutboxListenerIdle": {Fn: (*repo.Repo).OutboxListenerIdle, Args: []any{r, ctx, pool, &repo.OutboxListenerIdleParams{
			ListenerID: "relay", TTL: time.Minute}}, Deep: []int{3}},
		"Repo.OutboxListenerAwake":  {Fn: (*repo.Repo).OutboxListenerAwake, Args: []any{r, ctx, pool, &repo.OutboxListenerAwakeParams{ListenerID: "relay"}}, Deep: []int{3}},
		"Repo.GetAttempt":           {Fn: (*repo.Repo).GetAttempt, Args: []any{r, ctx, pool, &repo.GetAttemptParams{TenantID: "tenant", AttemptID: id()}}, Deep: []int{3}},
		"Repo.GetAttemptWithOutbox": {Fn: (*repo.Repo).GetAttemptWithOutbox, Args: []any{r, ctx, pool, &repo.GetAttemptWithOutboxParams{TenantID: "tenant", AttemptID: id()}}, Deep: []int{3}},
		"Repo.HeadRevision":         {Fn: (*repo.Repo).HeadRevision, Args: []any{r, ctx, pool, &repo.HeadRevisionParams{TenantID: "tenant", KnowledgeSpaceID: id()}}, Deep: []int{3}},
		"Repo.ListDocumentVersionAttempts": {Fn: (*repo.Repo).ListDocumentVersionAttempts, Args: []any{r, ctx, pool, &repo.ListDocumentVersionAttemptsParams{
			TenantID: "tenant", KnowledgeSpaceID: id(), DocumentAssetID: id(), DocumentVersion: 1}}, Deep: []int{3}},
		"Repo.SetTenantLimit":    {Fn: (*repo.Repo).SetTenantLimit, Args: []any{r, ctx, pool, &repo.SetTenantLimitParams{TenantID: "tenant", MaxRunning: 2}}, Deep: []int{3}},
		"Repo.RemoveTenantLimit": {Fn: (*repo.Repo).RemoveTenantLimit, Args: []any{r, ctx, pool, &repo.RemoveTenantLimitParams{TenantID: "tenant"}}, Deep: []int{3}},
		"Repo.ListTenantLimits":  {Fn: (*repo.Repo).ListTenantLimits, Args: []any{r, ctx, pool, &repo.ListTenantLimitsParams{}}},
		"Repo.SetTenantRate": {Fn: (*repo.Repo).SetTenantRate, Args: []any{r, ctx, pool, &repo.SetTenantRateParams{TenantID: "tenant",
			Rate: 0.5, Burst: 2}}, Deep: []int{3}},
		"Repo.RemoveTenantRate": {Fn: (*repo.Repo).RemoveTenantRate, Args: []any{r, ctx, pool, &repo.RemoveTenantRateParams{TenantID: "tenant"}}, Deep: []int{3}},
		"Repo.PauseTenant": {Fn: (*repo.Repo).PauseTenant, Args: []any{r, ctx, pool, &repo.PauseTenantParams{TenantID: "tenant",
			Reason: str("maintenance")}}, Deep: []int{3}},
		"Repo.ResumeTenant":      {Fn: (*repo.Repo).ResumeTenant, Args: []any{r, ctx, pool, &repo.ResumeTenantParams{TenantID: "tenant"}}, Deep: []int{3}},
		"Repo.GetTenantLimit":    {Fn: (*repo.Repo).GetTenantLimit, Args: []any{r, ctx, pool, &repo.GetTenantLimitParams{TenantID: "tenant"}}, Deep: []int{3}},
		"TenantLimit.Paused":     {Fn: repo.TenantLimit.Paused, Args: []any{repo.TenantLimit{TenantID: "tenant"}}},
		"Repo.CountTenantLimits": {Fn: (*repo.Repo).CountTenantLimits, Args: []any{r, ctx, pool, &repo.CountTenantLimitsParams{}}},
		"Repo.TraceContexts":     {Fn: (*repo.Repo).TraceContexts, Args: []any{r, ctx, pool, &repo.TraceContextsParams{AttemptIDs: []uuid.UUID{id()}}}, Deep: []int{3}},
		"Repo.CountLiveAttempts": {Fn: (*repo.Repo).CountLiveAttempts, Args: []any{r, ctx, pool, &repo.CountLiveAttemptsParams{TenantID: "tenant"}}, Deep: []int{3}},
		"Repo.ListAttempts": {Fn: (*repo.Repo).ListAttempts, Args: []any{r, ctx, pool, &repo.ListAttemptsParams{TenantID: "tenant",
			States: []kfstype.RunState{kfstype.RunStateFailed}, KnowledgeSpaceID: new(id()),
			After: &repo.AttemptCursor{CompletedAt: new(time.Now()), ID: id()}, Limit: 10,
			OlderThan: time.Hour, NewerThan: 24 * time.Hour, LastErrorCode: "E"}}, Deep: []int{3}},
		"Repo.CountAttempts": {Fn: (*repo.Repo).CountAttempts, Args: []any{r, ctx, pool, &repo.CountAttemptsParams{TenantID: "tenant", Cap: 10}}, Deep: []int{3}},
		"Repo.OutboxBacklog": {Fn: (*repo.Repo).OutboxBacklog, Args: []any{r, ctx, pool, &repo.OutboxBacklogParams{Cap: 10}}, Deep: []int{3}},
		"Repo.ListStuck": {Fn: (*repo.Repo).ListStuck, Args: []any{r, ctx, pool, &repo.ListStuckParams{TenantID: "tenant",
			PendingOverdue: time.Minute, Limit: 10}}, Deep: []int{3}},
		"Repo.Throughput":         {Fn: (*repo.Repo).Throughput, Args: []any{r, ctx, pool, &repo.ThroughputParams{TenantID: "tenant", Minutes: 15}}, Deep: []int{3}},
		"MinuteCount.Total":       {Fn: repo.MinuteCount.Total, Args: []any{repo.MinuteCount{Succeeded: 1}}},
		"StuckReasons":            {Fn: repo.StuckReasons},
		"Lease.StopBy":            {Fn: (*repo.Lease).StopBy, Args: []any{lease()}},
		"StuckReason.Description": {Fn: repo.StuckReason.Description, Args: []any{repo.StuckLeaseExpired}},
	}
	apiwalk.Walk(t, "../../repo", cases, inputRules, func(call func()) func(*testing.T, string, error) {
		sent := counter.count(call)
		return func(t *testing.T, variant string, err error) {
			var ie *repo.InputError
			if !errors.As(err, &ie) || !errors.Is(err, repo.ErrInvalidInput) || ie.Field == "" {
				t.Errorf("%s: want an *InputError naming the field, got %v", variant, err)
			}
			if sent != 0 {
				t.Errorf("%s reached the database (%d statements): %v", variant, sent, err)
			}
		}
	}, func(t *testing.T, err error) {
		require.NotErrorIs(t, err, repo.ErrInvalidInput, "the valid call is refused as input")
	})
	require.Equal(t, before, snapshotTables(ctx, t, b.db.Pool), "a row changed")
}

// snapshotTables returns every attempt and outbox row as JSON.
func snapshotTables(ctx context.Context, t *testing.T, db repo.DBTX) [2]string {
	t.Helper()
	var s [2]string
	for i, table := range []string{"document_compilation_attempts", "document_compilation_outbox"} {
		require.NoError(t, db.QueryRow(ctx, `SELECT coalesce(jsonb_agg(to_jsonb(r) ORDER BY r.id), '[]')::text FROM `+table+` r`).Scan(&s[i]))
	}
	return s
}
