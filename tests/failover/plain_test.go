package failover_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/knowledgefs/kfsdb/kfstype"
	"github.com/knowledgefs/kfsdb/pgsource"
	"github.com/knowledgefs/kfsdb/repo"
	"github.com/knowledgefs/kfsdb/tests/hacluster"
	"github.com/knowledgefs/kfsdb/tests/testfactory"
	"github.com/knowledgefs/kfsdb/worker"
)

// Bounds of the waits (hangs, not speed: the machine is shared).
const (
	promotionTimeout = 2 * time.Minute
	rejoinTimeout    = 4 * time.Minute
	stallTimeout     = 2 * time.Minute
)

// TestFailoverPlain runs a direct-delivery worker (pgsource with LISTEN)
// and a producer on the cluster's multi-host URL, kills the primary, and
// waits for pg_auto_failover to promote the standby: the pool reaches the
// new primary by itself, every error the producer saw meanwhile is
// repo.IsRetryable, pgsource's listener LISTENs on the new primary, and a
// Start retried after an error never duplicates an attempt. Then the old
// primary rejoins as a standby and the new primary is killed: the same
// again, back on the first node. Every attempt ends succeeded, once, with
// no overlapping leases.
func TestFailoverPlain(t *testing.T) {
	c := startCluster(t, true)
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, c.URL(hacluster.Database))
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	testfactory.InstallLeaseAudit(ctx, t, pool)

	docs := testfactory.SeedDocuments(ctx, t, pool, 2, 150)
	cands := testfactory.Candidates(docs)
	logs := &testfactory.SyncBuffer{}
	log := slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelWarn}))
	r := repo.New(nil)
	src, err := pgsource.New(pool, &pgsource.Config{Logger: log, Repo: r, PollInterval: 5 * time.Second})
	require.NoError(t, err)
	h := worker.HandlerFunc(func(ctx context.Context, job *worker.Job) error {
		return testfactory.CompileJob(ctx, job, cands[job.Attempt.KnowledgeSpaceID], func(ctx context.Context) error {
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(20 * time.Millisecond):
				return nil
			}
		})
	})
	w, err := worker.New(pool, src, h, &worker.Config{ID: "failover-worker", Concurrency: 4, Logger: log, Repo: r,
		LeaseDuration: 5 * time.Second, WriteTimeout: 2 * time.Second,
		RetryBackoffBase: 100 * time.Millisecond, RetryBackoffCap: time.Second})
	require.NoError(t, err)
	stopWorker := testfactory.RunAll(ctx, t, w.Run)

	p := &producer{r: r, pool: pool}
	pctx, stopProducer := context.WithCancel(ctx)
	var pwg sync.WaitGroup
	pwg.Go(func() { p.run(pctx, docs, 50*time.Millisecond) })

	first, err := c.Primary(ctx)
	require.NoError(t, err)
	waitSucceeded(ctx, t, pool, 20)
	second := failover(ctx, t, c, pool, p, first)

	require.NoError(t, c.StartNode(ctx, first))
	require.NoError(t, c.WaitHealthy(ctx, rejoinTimeout), "%s did not rejoin", first)
	t.Logf("%s rejoined as a standby of %s", first, second)
	back := failover(ctx, t, c, pool, p, second)
	require.Equal(t, first, back, "failover back")

	stopProducer()
	pwg.Wait()
	ids := p.ids()
	waitAllEnded(ctx, t, pool, ids)
	stopWorker()

	for _, id := range ids {
		rows := testfactory.RequireInvariants(ctx, t, pool, id)
		require.Equal(t, kfstype.RunStateSucceeded, rows.Attempt.RunState, "attempt %s", id)
	}
	leases := testfactory.RequireNoLeaseOverlap(ctx, t, pool)
	var total int
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM document_compilation_attempts`).Scan(&total))
	require.Equal(t, len(ids), total, "attempts in the database vs Starts acknowledged: a retried Start duplicated one, or one was lost")
	require.Empty(t, p.fatal(), "Start errors that are not repo.IsRetryable")
	t.Logf("attempts=%d (all succeeded once) leases=%d (none overlapping); Start errors seen (all retryable): %s",
		len(ids), leases, p.errorSummary())
	t.Logf("worker and pgsource warnings while no primary answered:\n%s", summarizeLogs(logs.String()))
}

// failover kills the primary (old), waits for pg_auto_failover's promotion
// and for kfsdb to work on the new primary: a Start, a completion, and
// pgsource's LISTEN there. It returns the new primary.
func failover(ctx context.Context, t *testing.T, c *hacluster.Cluster, pool *pgxpool.Pool, p *producer, old string) string {
	t.Helper()
	killed, err := c.KillPrimary(ctx)
	require.NoError(t, err)
	require.Equal(t, old, killed)
	kill := time.Now()
	p.markKill(kill)
	primary, err := c.WaitPrimary(ctx, old, promotionTimeout)
	require.NoError(t, err)
	promoted := time.Since(kill)
	startRTO := p.waitStartAfter(ctx, t, kill)
	completeRTO := waitCompletedAfter(ctx, t, pool, kill)
	listen := waitListener(ctx, t, c, primary, kill)
	t.Logf("failover %s -> %s: promoted %s after the kill; first Start %s, first completion %s; pgsource LISTENs on %s %s after the kill",
		old, primary, promoted.Round(time.Millisecond), startRTO.Round(time.Millisecond), completeRTO.Round(time.Millisecond),
		primary, listen.Round(time.Millisecond))
	return primary
}

// waitListener waits until a session on node LISTENs on the outbox
// channel (pgsource's listener reconnected there) and returns when,
// counted from the kill.
func waitListener(ctx context.Context, t *testing.T, c *hacluster.Cluster, node string, kill time.Time) time.Duration {
	t.Helper()
	u, err := c.NodeURL(node, hacluster.Database)
	require.NoError(t, err)
	np, err := pgxpool.New(ctx, u)
	require.NoError(t, err)
	defer np.Close()
	t0 := time.Now()
	deadline := t0.Add(stallTimeout)
	for {
		var n int
		err := np.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND query ILIKE 'LISTEN %'`).Scan(&n)
		if err == nil && n > 0 {
			return time.Since(kill)
		}
		require.True(t, time.Now().Before(deadline), "no session LISTENs on %s %s after its promotion (last error %v)", node, stallTimeout, err)
		time.Sleep(100 * time.Millisecond)
	}
}

// producer starts one attempt per document, retrying a Start whose error
// is retryable with the same parameters until it succeeds.
type producer struct {
	r    *repo.Repo
	pool *pgxpool.Pool

	mu        sync.Mutex
	started   map[uuid.UUID]bool
	order     []uuid.UUID
	firstOK   map[time.Time]time.Time // kill time -> first successful Start after it
	kills     []time.Time
	errs      map[string]int // retryable errors by message class
	samples   map[string]string
	nonRetry  []string
	duplicate int
}

func (p *producer) run(ctx context.Context, docs []testfactory.Document, every time.Duration) {
	for _, d := range docs {
		params := d.Scope.StartParams()
		for {
			cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			res, err := p.r.Start(cctx, p.pool, params)
			cancel()
			if ctx.Err() != nil {
				return
			}
			if err == nil {
				p.ok(res)
				break
			}
			if !p.failed(err) {
				break
			}
			time.Sleep(50 * time.Millisecond)
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(every):
		}
	}
}

func (p *producer) ok(res *repo.StartResult) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.started == nil {
		p.started, p.firstOK = map[uuid.UUID]bool{}, map[time.Time]time.Time{}
	}
	if p.started[res.Attempt.ID] {
		// A retried Start found the attempt its first try created.
		p.duplicate++
		return
	}
	p.started[res.Attempt.ID] = true
	p.order = append(p.order, res.Attempt.ID)
	now := time.Now()
	for _, k := range p.kills {
		if _, seen := p.firstOK[k]; !seen {
			p.firstOK[k] = now
		}
	}
}

// failed records err and reports whether the Start is to be retried.
func (p *producer) failed(err error) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.errs == nil {
		p.errs = map[string]int{}
	}
	if !repo.IsRetryable(err) {
		p.nonRetry = append(p.nonRetry, err.Error())
		return false
	}
	class := errorClass(err)
	p.errs[class]++
	if p.samples == nil {
		p.samples = map[string]string{}
	}
	if _, ok := p.samples[class]; !ok {
		p.samples[class] = err.Error()
	}
	return true
}

func (p *producer) markKill(t time.Time) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.kills = append(p.kills, t)
}

// waitStartAfter waits for the first Start acknowledged after kill and
// returns its delay from kill.
func (p *producer) waitStartAfter(ctx context.Context, t *testing.T, kill time.Time) time.Duration {
	t.Helper()
	deadline := time.Now().Add(stallTimeout)
	for {
		p.mu.Lock()
		at, ok := p.firstOK[kill]
		p.mu.Unlock()
		if ok {
			return at.Sub(kill)
		}
		require.True(t, time.Now().Before(deadline), "no Start succeeded %s after the kill", stallTimeout)
		select {
		case <-ctx.Done():
			t.Fatal(ctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
}

func (p *producer) ids() []uuid.UUID {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]uuid.UUID(nil), p.order...)
}

func (p *producer) fatal() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.nonRetry
}

func (p *producer) errorSummary() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	var parts []string
	for k, n := range p.errs {
		parts = append(parts, fmt.Sprintf("%d× %s (e.g. %q)", n, k, p.samples[k]))
	}
	sort.Strings(parts)
	return fmt.Sprintf("%s; retried Starts that found their attempt: %d", strings.Join(parts, "; "), p.duplicate)
}

// errorClass shortens an error to its kind (connection refused, EOF, a
// SQLSTATE…) for the summary.
func errorClass(err error) string {
	s := err.Error()
	for _, k := range []string{"connection refused", "unexpected EOF", "EOF", "read-only", "read only", "timeout", "deadline exceeded", "broken pipe", "connection reset", "SQLSTATE"} {
		if strings.Contains(s, k) {
			if k == "SQLSTATE" {
				i := strings.Index(s, "SQLSTATE")
				return s[i:min(len(s), i+14)]
			}
			return k
		}
	}
	if errors.Is(err, context.DeadlineExceeded) {
		return "deadline exceeded"
	}
	return s
}

// waitSucceeded waits until n attempts have succeeded.
func waitSucceeded(ctx context.Context, t *testing.T, pool *pgxpool.Pool, n int) {
	t.Helper()
	deadline := time.Now().Add(stallTimeout)
	for {
		var done int
		err := pool.QueryRow(ctx, `SELECT count(*) FROM document_compilation_attempts WHERE run_state = 'succeeded'`).Scan(&done)
		if err == nil && done >= n {
			return
		}
		require.True(t, time.Now().Before(deadline), "%d of %d attempts succeeded after %s (last error %v)", done, n, stallTimeout, err)
		time.Sleep(100 * time.Millisecond)
	}
}

// waitCompletedAfter waits until an attempt completes after kill (the
// database's clock is the host's: the containers share its kernel) and
// returns the delay.
func waitCompletedAfter(ctx context.Context, t *testing.T, pool *pgxpool.Pool, kill time.Time) time.Duration {
	t.Helper()
	deadline := time.Now().Add(stallTimeout)
	for {
		var first *time.Time
		err := pool.QueryRow(ctx, `SELECT min(completed_at) FROM document_compilation_attempts WHERE completed_at > $1`, kill).Scan(&first)
		if err == nil && first != nil {
			return first.Sub(kill)
		}
		require.True(t, time.Now().Before(deadline), "no attempt completed %s after the kill (last error %v)", stallTimeout, err)
		time.Sleep(100 * time.Millisecond)
	}
}

// waitAllEnded waits until every one of ids has ended; it fails when none
// ended for stallTimeout (a hang), never on the total time.
func waitAllEnded(ctx context.Context, t *testing.T, pool *pgxpool.Pool, ids []uuid.UUID) {
	t.Helper()
	last, moved := -1, time.Now()
	for {
		var live int
		err := pool.QueryRow(ctx, `SELECT count(*) FROM document_compilation_attempts WHERE id = ANY($1) AND completed_at IS NULL`, ids).Scan(&live)
		if err == nil && live == 0 {
			return
		}
		if err == nil && live != last {
			last, moved = live, time.Now()
		}
		require.Less(t, time.Since(moved), stallTimeout, "%d of %d attempts still live, none ended for %s (last error %v)", live, len(ids), stallTimeout, err)
		time.Sleep(100 * time.Millisecond)
	}
}

// summarizeLogs counts the warning lines by message.
func summarizeLogs(s string) string {
	counts := map[string]int{}
	for _, line := range strings.Split(strings.TrimSpace(s), "\n") {
		if line == "" {
			continue
		}
		msg := line
		if i := strings.Index(line, "msg="); i >= 0 {
			msg = line[i+4:]
			if j := strings.Index(msg, " err="); j >= 0 {
				msg = msg[:j] + " (err " + errorClass(errors.New(msg[j:])) + ")"
			}
		}
		counts[msg]++
	}
	var out []string
	for m, n := range counts {
		out = append(out, fmt.Sprintf("  %d× %s", n, m))
	}
	sort.Strings(out)
	return strings.Join(out, "\n")
}
