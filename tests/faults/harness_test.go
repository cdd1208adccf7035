package faults_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/knowledgefs/kfsdb/repo"
	"github.com/knowledgefs/kfsdb/tests/capability"
	"github.com/knowledgefs/kfsdb/tests/pgtest"
)

// soak reports whether the long form runs (KFS_SOAK=1).
func soak() bool { return os.Getenv("KFS_SOAK") == "1" }

// Load shape: CI-sized unless KFS_SOAK=1.
const (
	leaseDuration = 2 * time.Second
	workers       = 8
	stepDelay     = 25 * time.Millisecond
	maxAttempts   = 50 // faults cost execution attempts; none may run out
)

func loadSize() (upfront, during int) {
	if soak() {
		return 1500, 500
	}
	return 200, 100
}

var discardLog = slog.New(slog.DiscardHandler)

// requireContainer skips tests that restart or pause the server when the
// package runs against KFS_TEST_DATABASE_URL.
func requireContainer(t *testing.T) *pgtest.Server {
	t.Helper()
	srv := pgtest.CurrentServer(t)
	if !srv.IsContainer() {
		capability.Missing(t, capability.Container, "faults: %s is set, so there is no container to restart or pause; run without it (pgtest starts %s) for this test",
			pgtest.EnvDatabaseURL, pgtest.DefaultImage)
	}
	return srv
}

func newPool(t testing.TB, url string, maxConns int32) *pgxpool.Pool {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(url)
	require.NoError(t, err)
	cfg.MaxConns = maxConns
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	return pool
}

// retry calls f until it returns nil or an error repo.IsRetryable rejects,
// for at most a minute. Every transient error must match none of the state
// sentinels: a connection error never reads as a state.
func retry[T any](ctx context.Context, t testing.TB, errs *errorLog, f func(context.Context) (T, error)) (T, error) {
	deadline := time.Now().Add(time.Minute)
	for {
		cctx, cancel := context.WithTimeout(ctx, time.Second)
		v, err := f(cctx)
		cancel()
		if err == nil || !repo.IsRetryable(err) || time.Now().After(deadline) {
			return v, err
		}
		errs.transient(t, err)
		time.Sleep(50 * time.Millisecond)
	}
}

// stateSentinels are the errors that report a row's state.
var stateSentinels = []error{
	repo.ErrNotFound, repo.ErrStaleRowVersion, repo.ErrLeaseLost, repo.ErrDeliveryMismatch, repo.ErrDeliveryPending,
	repo.ErrInvalidTransition, repo.ErrHeadConflict, repo.ErrLiveAttemptExists, repo.ErrAttemptsExhausted,
	repo.ErrCandidateRejected, repo.ErrInvalidInput, repo.ErrConstraint, repo.ErrOutboxLockLost,
}

// errorLog counts transient errors seen by callers and records any that
// matched a state sentinel.
type errorLog struct {
	n        atomic.Int64
	mu       sync.Mutex
	wrong    []string
	examples map[string]bool
}

func (l *errorLog) transient(t testing.TB, err error) {
	l.n.Add(1)
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, s := range stateSentinels {
		if errors.Is(err, s) {
			l.wrong = append(l.wrong, fmt.Sprintf("%v (matches %v)", err, s))
		}
	}
	if l.examples == nil {
		l.examples = map[string]bool{}
	}
	if len(l.examples) < 5 {
		l.examples[err.Error()] = true
	}
}

func (l *errorLog) requireClean(t testing.TB) {
	t.Helper()
	l.mu.Lock()
	defer l.mu.Unlock()
	require.Empty(t, l.wrong, "transient errors that read as a state")
}
