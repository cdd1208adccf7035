package migrations

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"text/tabwriter"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/pressly/goose/v3"
	"github.com/stretchr/testify/require"

	"github.com/knowledgefs/kfsdb/migrate"
	"github.com/knowledgefs/kfsdb/tests/pgtest"
)

// envMigrationLocks=1 runs TestMigrationLocks, the 10⁶-row measurement of
// migration 0006's locks (make migration-locks); envMigrationLocksSpaces
// overrides its row count.
const (
	envMigrationLocks       = "KFS_MIGRATION_LOCKS"
	envMigrationLocksSpaces = "KFS_MIGRATION_LOCKS_SPACES"
)

// Application names of the sessions, which is how the sampler tells them
// apart in pg_stat_activity.
const (
	appMigrate     = "kfsdb-migrate"
	appLongTx      = "long-transaction"
	appBlocker     = "blocker"
	appLockSampler = "lock-sampler"
	// appCommitBlocker holds the version table so that 0006 cannot record
	// its version, and so cannot commit, until the test lets it.
	appCommitBlocker = "commit-blocker"
)

// versionTable is the version table the migrations record into.
const versionTable = migrate.VersionTable

// lockSampleInterval is how often the sampler reads pg_locks.
const lockSampleInterval = 20 * time.Millisecond

// trafficStatementTimeout is the application streams' statement_timeout:
// an application gives up on a statement after a few seconds, not never.
const trafficStatementTimeout = 3 * time.Second

// trafficPause is each application stream's pause between statements.
const trafficPause = 10 * time.Millisecond

// blockedAfter is the latency above which a traffic statement counts as
// blocked (its usual latency is well under a millisecond).
const blockedAfter = 50 * time.Millisecond

// TestMigrationLocksSmall is the CI-sized form of TestMigrationLocks: 10⁴
// spaces. It checks that 0006 takes what it must (ACCESS EXCLUSIVE on
// knowledge_spaces, SHARE on document_assets and projection_set_publications,
// all held to commit), that reads of knowledge_spaces queue behind its
// waiting ACCESS EXCLUSIVE request, and that a lock_timeout failure rolls it
// back and leaves version 4.
func TestMigrationLocksSmall(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	db := pgtest.NewEmptyDB(t)
	seedVersion4(ctx, t, db, 10_000)
	var report strings.Builder

	// A session that read knowledge_spaces and stays in its transaction:
	// 0006's ALTER TABLE waits for it, and fails after the lock timeout.
	timedOut := runLockStudy(ctx, t, db.URL, lockStudy{
		name:        "long transaction holds ACCESS SHARE on knowledge_spaces; lock_timeout 1s",
		lockTimeout: time.Second,
		holds:       []heldLock{{sql: `SELECT count(*) FROM knowledge_spaces`, app: appLongTx}},
		settle:      300 * time.Millisecond,
	})
	timedOut.print(&report)
	requireLockNotAvailable(t, timedOut.err)
	requireVersion4(ctx, t, db)
	require.True(t, timedOut.saw(appMigrate, "knowledge_spaces", "AccessExclusiveLock", false), "the migration waited for ACCESS EXCLUSIVE on knowledge_spaces")
	require.Greater(t, timedOut.longestBlocked(streamReadSpaces), 500*time.Millisecond,
		"reads of knowledge_spaces queue behind the waiting ACCESS EXCLUSIVE request")

	// Two sessions the test controls make each lock last until the sampler
	// has seen it, however fast the server and however slow the sampler: a
	// writer in projection_set_publications keeps 0006 waiting at its index
	// there (by then it holds its earlier locks), and a SHARE lock on the
	// version table keeps 0006 from recording its version, the last thing it
	// does before its commit, so every lock it took is held, granted, until
	// a sample has shown them all. (Sampling alone raced the commit: after
	// the first release 0006 could take its last lock and commit between
	// two samples.)
	holdsAll := func(s *lockSampler) bool {
		return sawLock(appMigrate, versionTable, "RowExclusiveLock", false)(s) &&
			sawLock(appMigrate, "knowledge_spaces", "AccessExclusiveLock", true)(s) &&
			sawLock(appMigrate, "document_assets", "ShareLock", true)(s) &&
			sawLock(appMigrate, "projection_set_publications", "ShareLock", true)(s)
	}
	blocked := runLockStudy(ctx, t, db.URL, lockStudy{
		name: "open INSERT transaction on projection_set_publications until 0006 waits for it; the version table held until 0006 holds every lock",
		holds: []heldLock{
			{
				sql:         `LOCK TABLE projection_set_publications IN ROW EXCLUSIVE MODE`,
				app:         appBlocker,
				releaseWhen: sawLock(appMigrate, "projection_set_publications", "ShareLock", false),
			},
			{
				sql:         `LOCK TABLE ` + versionTable + ` IN SHARE MODE`,
				app:         appCommitBlocker,
				releaseWhen: holdsAll,
			},
		},
		// Not the inserts into document_assets: one that has taken its
		// table's ROW EXCLUSIVE lock but not yet begun to wait on
		// knowledge_spaces when 0006 asks for SHARE there deadlocks with
		// 0006, and PostgreSQL then aborts 0006 (it waited first); a loaded
		// machine widens that window (seen once in a -race run). That
		// deadlock is TestMigrationLocks' subject, not this study's.
		skipStreams: []string{streamInsertAssets},
		settle:      300 * time.Millisecond,
	})
	blocked.print(&report)
	require.NoError(t, blocked.err)
	for _, want := range []struct {
		relation, mode string
	}{
		{"knowledge_spaces", "AccessExclusiveLock"},
		{"document_assets", "ShareLock"},
		{"projection_set_publications", "ShareLock"},
	} {
		require.True(t, blocked.saw(appMigrate, want.relation, want.mode, true), "the migration holds %s on %s", want.mode, want.relation)
	}
	v, err := provider(ctx, t, db.URL).GetDBVersion(ctx)
	require.NoError(t, err)
	require.EqualValues(t, versionAttempts, v)
	t.Log("\n" + report.String())
}

// TestMigrationLocks measures migration 0006 on 10⁶ knowledge_spaces (and
// as many document_assets, a quarter as many projection_set_publications)
// under a stream of application reads and writes: which locks it takes, for
// how long, how long the application waits, and what lock_timeout does when
// a long transaction is in the way. KFS_MIGRATION_LOCKS=1 runs it (make
// migration-locks).
func TestMigrationLocks(t *testing.T) {
	if os.Getenv(envMigrationLocks) != "1" {
		t.Skipf("set %s=1 to run the 10^6-row measurement (make migration-locks)", envMigrationLocks)
	}
	ctx := t.Context()
	spaces := 1_000_000
	if s := os.Getenv(envMigrationLocksSpaces); s != "" {
		n, err := strconv.Atoi(s)
		require.NoError(t, err, envMigrationLocksSpaces)
		spaces = n
	}
	db := pgtest.NewEmptyDB(t)
	out := os.Stdout
	fmt.Fprintf(out, "migration 0006 locks on %s\n\n", pgtest.CurrentServer(t).Description())
	seedVersion4(ctx, t, db, spaces)
	fmt.Fprintf(out, "version 4 with %s\n\n", tableSizes(ctx, t, db))

	// Every study runs with the lock_timeout this measurement recommends.
	study := func(s lockStudy) error {
		s.lockTimeout = 2 * time.Second
		res := runLockStudy(ctx, t, db.URL, s)
		res.print(out)
		return res.err
	}

	err := study(lockStudy{
		name:  "long transaction holds ACCESS SHARE on knowledge_spaces; lock_timeout 2s",
		holds: []heldLock{{sql: `SELECT count(*) FROM knowledge_spaces`, app: appLongTx}},
	})
	requireLockNotAvailable(t, err)
	requireVersion4(ctx, t, db)

	// The application's inserts into document_assets wait on
	// knowledge_spaces (their foreign key check) while holding ROW
	// EXCLUSIVE on document_assets, which 0006 then needs in SHARE mode: a
	// deadlock. PostgreSQL checks a waiting session once, deadlock_timeout
	// (1s) after it began to wait, so it aborts 0006 whenever an insert has
	// been waiting longer than that when 0006 reaches its document_assets
	// index: here an insert without a statement_timeout.
	err = study(lockStudy{
		name:        "application reads and writes; its inserts into document_assets have no statement_timeout; lock_timeout 2s",
		waitForever: []string{streamInsertAssets},
	})
	requireDeadlock(t, err)
	requireVersion4(ctx, t, db)

	// With a statement_timeout the waiting insert may give up before 0006
	// checks for the deadlock: a race.
	err = study(lockStudy{name: "application reads and writes, nothing else in the way; lock_timeout 2s"})
	if err == nil {
		return
	}
	requireDeadlock(t, err)
	requireVersion4(ctx, t, db)

	err = study(lockStudy{
		name:        "retried without the inserts into document_assets (reads and knowledge_spaces inserts go on); lock_timeout 2s",
		skipStreams: []string{streamInsertAssets},
	})
	require.NoError(t, err)
}

// seedVersion4 migrates db to version 4 and fills it: spaces
// knowledge_spaces over 1,000 tenants, one document_asset per space, one
// projection_set_publication per fourth space; then VACUUM ANALYZE, as a
// production table would be.
func seedVersion4(ctx context.Context, t *testing.T, db *pgtest.DB, spaces int) {
	t.Helper()
	_, err := provider(ctx, t, db.URL).UpTo(ctx, versionBeforeAttempts)
	require.NoError(t, err)
	for _, stmt := range []string{
		`INSERT INTO knowledge_spaces (id, tenant_id, slug, name, description)
		 SELECT gen_random_uuid(), 'tenant-' || (g % 1000), 'space-' || g, 'Space ' || g, 'seeded for the lock measurement'
		   FROM generate_series(1, $1::int) g`,
		`INSERT INTO document_assets (id, knowledge_space_id, filename, mime_type, object_key, sha256, size_bytes, version)
		 SELECT gen_random_uuid(), id, 'handbook.pdf', 'application/pdf', 'objects/' || id, repeat('0', 64), 123456, 1
		   FROM knowledge_spaces`,
		`INSERT INTO projection_set_publications (id, tenant_id, knowledge_space_id, fingerprint, projection_version, status)
		 SELECT gen_random_uuid(), tenant_id, id, md5(id::text), 1, 'published'
		   FROM knowledge_spaces WHERE right(slug, 1) IN ('0', '4') -- one space in four`,
	} {
		args := []any{}
		if strings.Contains(stmt, "$1") {
			args = append(args, spaces)
		}
		_, err := db.Pool.Exec(ctx, stmt, args...)
		require.NoError(t, err)
	}
	_, err = db.Pool.Exec(ctx, `VACUUM (ANALYZE) knowledge_spaces, document_assets, projection_set_publications`)
	require.NoError(t, err)
}

// tableSizes describes the rows and sizes (with indexes) of the tables 0006
// alters or indexes.
func tableSizes(ctx context.Context, t *testing.T, db *pgtest.DB) string {
	t.Helper()
	var parts []string
	for _, table := range []string{"knowledge_spaces", "document_assets", "projection_set_publications"} {
		var rows int64
		var size string
		require.NoError(t, db.Pool.QueryRow(ctx,
			fmt.Sprintf(`SELECT count(*), pg_size_pretty(pg_total_relation_size('%s')) FROM %s`, table, table)).Scan(&rows, &size))
		parts = append(parts, fmt.Sprintf("%s: %d rows, %s", table, rows, size))
	}
	return strings.Join(parts, "; ")
}

// lockStudy is one run of 0006 (UpTo 6 from version 4) under traffic.
type lockStudy struct {
	// name says what is in the migration's way.
	name string
	// lockTimeout is the migration session's lock_timeout; 0 leaves none.
	lockTimeout time.Duration
	// holds are taken, each in a transaction of its own, before the
	// migration starts.
	holds []heldLock
	// skipStreams names application streams that do not run.
	skipStreams []string
	// waitForever names application streams that run without a
	// statement_timeout.
	waitForever []string
	// settle is how long the traffic runs before and after the migration
	// (baseline latencies; re-planned statements after it). Defaults to
	// a second.
	settle time.Duration
}

// heldLock is a statement run in a transaction (session application app)
// that stays open while the migration runs: until releaseWhen holds, else
// until the migration has ended.
type heldLock struct {
	sql         string
	app         string
	releaseWhen func(*lockSampler) bool
}

// lockStudyResult is what a lockStudy observed.
type lockStudyResult struct {
	name        string
	lockTimeout time.Duration
	// err is the migration's error.
	err error
	// migration is how long UpTo took; start is when it started.
	migration time.Duration
	start     time.Time
	// versionAfter is the database's version after the migration.
	versionAfter int64
	versionErr   error
	// skipped are the application streams that did not run.
	skipped []string
	samples *lockSampler
	ops     []trafficOp
}

// runLockStudy starts the application traffic and the lock sampler, takes
// the study's lock, lets the traffic settle, runs 0006, keeps the traffic
// going as long again and returns what was seen.
func runLockStudy(ctx context.Context, t *testing.T, dbURL string, study lockStudy) *lockStudyResult {
	t.Helper()
	res := &lockStudyResult{name: study.name, lockTimeout: study.lockTimeout, skipped: study.skipStreams}
	trafficCtx, stopTraffic := context.WithCancel(ctx)
	defer stopTraffic()

	res.samples = newLockSampler(ctx, t, dbURL)
	var wg sync.WaitGroup
	wg.Go(func() { res.samples.run(trafficCtx) })
	streams := newTraffic(ctx, t, dbURL, study.waitForever)
	var opsMu sync.Mutex
	for _, s := range streams {
		if slices.Contains(study.skipStreams, s.name) {
			continue
		}
		wg.Go(func() {
			ops := s.run(trafficCtx)
			opsMu.Lock()
			res.ops = append(res.ops, ops...)
			opsMu.Unlock()
		})
	}

	holders := make([]pgx.Tx, len(study.holds))
	for i, h := range study.holds {
		conn := connect(ctx, t, dbURL, h.app, 0)
		tx, err := conn.Begin(ctx)
		require.NoError(t, err)
		_, err = tx.Exec(ctx, h.sql)
		require.NoError(t, err)
		holders[i] = tx
	}
	release := func(i int) {
		if holders[i] != nil {
			require.NoError(t, holders[i].Rollback(context.WithoutCancel(ctx)))
			holders[i] = nil
		}
	}
	defer func() {
		for i := range holders {
			release(i)
		}
	}()

	if study.settle == 0 {
		study.settle = time.Second
	}
	time.Sleep(study.settle) // baseline latencies
	migrateDB, err := migrate.OpenSQLWithLockTimeout(ctx, withApplicationName(t, dbURL, appMigrate), study.lockTimeout)
	require.NoError(t, err)
	p, err := migrate.NewProvider(migrateDB)
	require.NoError(t, err)
	defer func() { require.NoError(t, p.Close()) }()

	done := make(chan struct{})
	res.start = time.Now()
	res.samples.setStart(res.start)
	go func() {
		defer close(done)
		_, res.err = p.UpTo(ctx, versionAttempts)
		res.migration = time.Since(res.start)
		res.versionAfter, res.versionErr = p.GetDBVersion(ctx)
	}()
	// Each hold is released once the sampler has seen its condition (a
	// state the holds themselves make last), or when the migration ends.
	for i, h := range study.holds {
		if h.releaseWhen == nil {
			continue
		}
		if !waitForSample(t, res.samples, done, h.releaseWhen) {
			break
		}
		release(i)
	}
	<-done
	for i := range holders {
		release(i)
	}
	time.Sleep(study.settle) // after the migration: recovery, re-planned statements
	stopTraffic()
	wg.Wait()
	slices.SortFunc(res.ops, func(a, b trafficOp) int { return a.start.Compare(b.start) })
	return res
}

// waitForSample waits until the sampler's next samples satisfy cond (true)
// or the migration has ended (false). The state cond looks for is one that
// a held lock keeps in place, so it lasts until a sample sees it; the bound
// only turns a lost wake-up into a failure with a message instead of a hang.
func waitForSample(t *testing.T, s *lockSampler, migrationDone <-chan struct{}, cond func(*lockSampler) bool) bool {
	t.Helper()
	deadline := time.After(2 * time.Minute)
	for !cond(s) {
		select {
		case <-migrationDone:
			return false
		case <-deadline:
			t.Fatal("the sampler never saw the awaited lock")
		case <-s.sampled():
		}
	}
	return true
}

// withApplicationName returns dbURL with application_name set to app.
func withApplicationName(t *testing.T, dbURL, app string) string {
	t.Helper()
	u, err := url.Parse(dbURL)
	require.NoError(t, err)
	q := u.Query()
	q.Set("application_name", app)
	u.RawQuery = q.Encode()
	return u.String()
}

// connect opens one connection named app, with statement_timeout set when
// statementTimeout is not zero, closed when the test ends.
func connect(ctx context.Context, t *testing.T, dbURL, app string, statementTimeout time.Duration) *pgx.Conn {
	t.Helper()
	cfg, err := pgx.ParseConfig(dbURL)
	require.NoError(t, err)
	cfg.RuntimeParams["application_name"] = app
	if statementTimeout > 0 {
		cfg.RuntimeParams["statement_timeout"] = fmt.Sprintf("%dms", statementTimeout.Milliseconds())
	}
	conn, err := pgx.ConnectConfig(ctx, cfg)
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close(context.Background()) })
	return conn
}

// requireLockNotAvailable checks that err is PostgreSQL's lock_timeout
// error (SQLSTATE 55P03) from inside goose's error.
func requireLockNotAvailable(t *testing.T, err error) {
	t.Helper()
	require.Error(t, err)
	var partial *goose.PartialError
	require.ErrorAs(t, err, &partial)
	require.EqualValues(t, versionAttempts, partial.Failed.Source.Version)
	var pgErr *pgconn.PgError
	require.ErrorAs(t, err, &pgErr)
	require.Equal(t, "55P03", pgErr.Code, "lock_not_available: %s", pgErr.Message)
}

// requireDeadlock checks that err is PostgreSQL's deadlock error (SQLSTATE
// 40P01) from inside goose's error.
func requireDeadlock(t *testing.T, err error) {
	t.Helper()
	var pgErr *pgconn.PgError
	require.ErrorAs(t, err, &pgErr)
	require.Equal(t, "40P01", pgErr.Code, "deadlock_detected: %v", err)
}

// requireVersion4 checks that the database is at version 4 with
// knowledge_spaces.tenant_id still TEXT and no attempts table.
func requireVersion4(ctx context.Context, t *testing.T, db *pgtest.DB) {
	t.Helper()
	v, err := provider(ctx, t, db.URL).GetDBVersion(ctx)
	require.NoError(t, err)
	require.EqualValues(t, versionBeforeAttempts, v)
	var dataType string
	var attempts *string
	require.NoError(t, db.Pool.QueryRow(ctx,
		`SELECT data_type, to_regclass('public.document_compilation_attempts')::text FROM information_schema.columns
		  WHERE table_schema = 'public' AND table_name = 'knowledge_spaces' AND column_name = 'tenant_id'`).Scan(&dataType, &attempts))
	require.Equal(t, "text", dataType)
	require.Nil(t, attempts)
}

// The application streams, also their sessions' application_name.
const (
	streamReadSpaces   = "read knowledge_spaces"
	streamInsertSpaces = "insert knowledge_spaces"
	streamReadAssets   = "read document_assets"
	streamInsertAssets = "insert document_assets"
)

// trafficOp is one application statement.
type trafficOp struct {
	stream  string
	start   time.Time
	latency time.Duration
	// outcome is "ok", "statement timeout" or the error's message.
	outcome string
}

// trafficStream is one application session issuing one kind of statement.
type trafficStream struct {
	name string
	conn *pgx.Conn
	// do runs the statement for the i-th time.
	do func(ctx context.Context, conn *pgx.Conn, i int) error
}

// newTraffic returns the application's streams: reads by primary key and
// inserts, on knowledge_spaces and on document_assets, each on its own
// connection with a short statement_timeout, but for those in waitForever.
func newTraffic(ctx context.Context, t *testing.T, dbURL string, waitForever []string) []*trafficStream {
	t.Helper()
	setup := connect(ctx, t, dbURL, "traffic-setup", 0)
	var spaceIDs, assetIDs []uuid.UUID
	rows, err := setup.Query(ctx, `SELECT ks.id, da.id FROM knowledge_spaces ks JOIN document_assets da ON da.knowledge_space_id = ks.id LIMIT 1000`)
	require.NoError(t, err)
	for rows.Next() {
		var s, a uuid.UUID
		require.NoError(t, rows.Scan(&s, &a))
		spaceIDs, assetIDs = append(spaceIDs, s), append(assetIDs, a)
	}
	require.NoError(t, rows.Err())
	require.NotEmpty(t, spaceIDs)
	run := uuid.NewString()[:8] // slugs unique across studies on one database

	stream := func(name string, do func(ctx context.Context, conn *pgx.Conn, i int) error) *trafficStream {
		timeout := trafficStatementTimeout
		if slices.Contains(waitForever, name) {
			timeout = 0
		}
		return &trafficStream{name: name, conn: connect(ctx, t, dbURL, name, timeout), do: do}
	}
	return []*trafficStream{
		stream(streamReadSpaces, func(ctx context.Context, conn *pgx.Conn, i int) error {
			var tenant, name string
			return conn.QueryRow(ctx, `SELECT tenant_id, name FROM knowledge_spaces WHERE id = $1`, spaceIDs[i%len(spaceIDs)]).Scan(&tenant, &name)
		}),
		stream(streamInsertSpaces, func(ctx context.Context, conn *pgx.Conn, i int) error {
			_, err := conn.Exec(ctx, `INSERT INTO knowledge_spaces (id, tenant_id, slug, name) VALUES ($1, 'tenant-traffic', $2, 'Traffic')`,
				uuid.New(), fmt.Sprintf("traffic-%s-%d", run, i))
			return err
		}),
		stream(streamReadAssets, func(ctx context.Context, conn *pgx.Conn, i int) error {
			var filename string
			return conn.QueryRow(ctx, `SELECT filename FROM document_assets WHERE id = $1`, assetIDs[i%len(assetIDs)]).Scan(&filename)
		}),
		stream(streamInsertAssets, func(ctx context.Context, conn *pgx.Conn, i int) error {
			_, err := conn.Exec(ctx, `INSERT INTO document_assets (id, knowledge_space_id, filename, mime_type, object_key, sha256, size_bytes, version)
				VALUES ($1, $2, 'notes.md', 'text/markdown', 'objects/traffic', repeat('0', 64), 10, 1)`, uuid.New(), spaceIDs[i%len(spaceIDs)])
			return err
		}),
	}
}

// run issues the stream's statement until ctx ends and returns every one.
func (s *trafficStream) run(ctx context.Context) []trafficOp {
	var ops []trafficOp
	for i := 0; ctx.Err() == nil; i++ {
		start := time.Now()
		err := s.do(ctx, s.conn, i)
		op := trafficOp{stream: s.name, start: start, latency: time.Since(start), outcome: "ok"}
		var pgErr *pgconn.PgError
		switch {
		case err == nil:
		case ctx.Err() != nil:
			return ops // cut short by the end of the study, not by a lock
		case errors.As(err, &pgErr) && pgErr.Code == "57014":
			op.outcome = "statement timeout"
		default:
			op.outcome = err.Error()
		}
		ops = append(ops, op)
		select {
		case <-ctx.Done():
		case <-time.After(trafficPause):
		}
	}
	return ops
}

// lockKey is one relation lock of one session, granted or awaited.
type lockKey struct {
	app, relation, mode string
	granted             bool
}

// seenSpan is when something was first and last sampled, relative to the
// migration's start (negative before it).
type seenSpan struct {
	first, last time.Duration
}

// lockSampler reads pg_locks joined to pg_stat_activity every
// lockSampleInterval and records, per session (application_name), which
// relation locks it held or awaited, and which statement the migration ran,
// and when.
type lockSampler struct {
	conn *pgx.Conn

	mu         sync.Mutex
	start      time.Time // the migration's start; zero before it
	locks      map[lockKey]*seenSpan
	lockOrder  []lockKey
	statements map[string]*seenSpan
	stmtOrder  []string
	samples    int
	// longestSample is the slowest sampling query, the sampler's own blind
	// spot.
	longestSample time.Duration
	// next is closed, and replaced, when a sample has been recorded.
	next chan struct{}
}

func newLockSampler(ctx context.Context, t *testing.T, dbURL string) *lockSampler {
	t.Helper()
	return &lockSampler{
		conn:       connect(ctx, t, dbURL, appLockSampler, 0),
		locks:      map[lockKey]*seenSpan{},
		statements: map[string]*seenSpan{},
		next:       make(chan struct{}),
	}
}

// sampled returns a channel closed when the next sample has been recorded.
func (s *lockSampler) sampled() <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.next
}

func (s *lockSampler) setStart(start time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.start = start
}

// lockSampleQuery lists the relation locks of every other session in this
// database. Relations the migration has created but not committed are not
// in this session's pg_class: they are named by what they are. Indexes are
// left out: a session locks the indexes of the tables it uses in the same
// mode.
const lockSampleQuery = `
SELECT a.application_name,
       coalesce(c.relname, '(relations the migration creates)'),
       l.mode, l.granted,
       CASE WHEN a.application_name = $1 AND a.state = 'active'
            THEN left(regexp_replace(a.query, '\s+', ' ', 'g'), 72) ELSE '' END
  FROM pg_locks l
  JOIN pg_stat_activity a ON a.pid = l.pid
  LEFT JOIN pg_class c ON c.oid = l.relation
 WHERE l.locktype = 'relation'
   AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())
   AND l.pid <> pg_backend_pid()
   AND coalesce(c.relkind, 'r') IN ('r', 'p')
   AND coalesce(c.relnamespace, 'public'::regnamespace) = 'public'::regnamespace`

// run samples until ctx ends.
func (s *lockSampler) run(ctx context.Context) {
	ticker := time.NewTicker(lockSampleInterval)
	defer ticker.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-ticker.C:
		}
		began := time.Now()
		rows, err := s.conn.Query(ctx, lockSampleQuery, appMigrate)
		if err != nil {
			continue // ctx ended mid-query
		}
		type row struct {
			key       lockKey
			statement string
		}
		var sampled []row
		for rows.Next() {
			var r row
			if rows.Scan(&r.key.app, &r.key.relation, &r.key.mode, &r.key.granted, &r.statement) == nil {
				sampled = append(sampled, r)
			}
		}
		rows.Close()
		s.mu.Lock()
		at := began.Sub(s.start)
		if s.start.IsZero() {
			at = 0
		}
		s.samples++
		s.longestSample = max(s.longestSample, time.Since(began))
		for _, r := range sampled {
			if r.key.app == appMigrate || r.key.app == appLongTx || r.key.app == appBlocker || !r.key.granted {
				s.locks, s.lockOrder = see(s.locks, s.lockOrder, r.key, at)
			}
			if r.statement != "" {
				s.statements, s.stmtOrder = see(s.statements, s.stmtOrder, r.statement, at)
			}
		}
		close(s.next)
		s.next = make(chan struct{})
		s.mu.Unlock()
	}
}

// see records that key was sampled at.
func see[K comparable](seen map[K]*seenSpan, order []K, key K, at time.Duration) (map[K]*seenSpan, []K) {
	if span, ok := seen[key]; ok {
		span.last = at
		return seen, order
	}
	seen[key] = &seenSpan{first: at, last: at}
	return seen, append(order, key)
}

// sawLock returns a condition on a sampler: that it saw app hold (granted)
// or await mode on relation.
func sawLock(app, relation, mode string, granted bool) func(*lockSampler) bool {
	return func(s *lockSampler) bool {
		s.mu.Lock()
		defer s.mu.Unlock()
		_, ok := s.locks[lockKey{app, relation, mode, granted}]
		return ok
	}
}

// saw reports whether the sampler saw app hold or await mode on relation.
func (r *lockStudyResult) saw(app, relation, mode string, granted bool) bool {
	return sawLock(app, relation, mode, granted)(r.samples)
}

// longestBlocked is the longest latency of stream's statements.
func (r *lockStudyResult) longestBlocked(stream string) time.Duration {
	var longest time.Duration
	for _, op := range r.ops {
		if op.stream == stream {
			longest = max(longest, op.latency)
		}
	}
	return longest
}

// print writes the study's report: the migration's outcome, its
// statements, the relation locks sampled, and the application's latencies.
func (r *lockStudyResult) print(out io.Writer) {
	fmt.Fprintf(out, "== %s\n", r.name)
	outcome := "applied, version 6"
	if r.err != nil {
		outcome = "FAILED: " + r.err.Error()
	}
	version := fmt.Sprint(r.versionAfter)
	if r.versionErr != nil {
		version = "unknown: " + r.versionErr.Error()
	}
	fmt.Fprintf(out, "migration 0006: %s in %s; version afterwards: %s\n", outcome, r.migration.Round(time.Millisecond), version)
	s := r.samples
	s.mu.Lock()
	defer s.mu.Unlock()
	fmt.Fprintf(out, "sampler: %d samples every %s (slowest sample %s); times are from the migration's start; a span is first..last sample\n\n",
		s.samples, lockSampleInterval, s.longestSample.Round(time.Millisecond))

	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "MIGRATION STATEMENT (pg_stat_activity)\tFIRST\tLAST\tSPAN")
	for _, stmt := range s.stmtOrder {
		span := s.statements[stmt]
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", stmt, ms(span.first), ms(span.last), ms(span.last-span.first))
	}
	fmt.Fprintln(tw)
	fmt.Fprintln(tw, "SESSION\tRELATION\tLOCK MODE\tGRANTED\tFIRST\tLAST\tSPAN")
	for _, k := range s.lockOrder {
		span := s.locks[k]
		fmt.Fprintf(tw, "%s\t%s\t%s\t%v\t%s\t%s\t%s\n", k.app, k.relation, k.mode, k.granted, ms(span.first), ms(span.last), ms(span.last-span.first))
	}
	fmt.Fprintln(tw)
	fmt.Fprintf(tw, "APPLICATION STREAM\tSTATEMENTS\tBLOCKED (>%s)\tTIMED OUT (%s)\tOTHER ERRORS\tP50\tLONGEST\tLONGEST STALL\n", blockedAfter, trafficStatementTimeout)
	errorsSeen := map[string]int{}
	for _, stream := range []string{streamReadSpaces, streamInsertSpaces, streamReadAssets, streamInsertAssets} {
		if slices.Contains(r.skipped, stream) {
			fmt.Fprintf(tw, "%s\t(not running)\n", stream)
			continue
		}
		var latencies []time.Duration
		blocked, timedOut, failed := 0, 0, 0
		for _, op := range r.ops {
			if op.stream != stream {
				continue
			}
			latencies = append(latencies, op.latency)
			switch {
			case op.outcome == "statement timeout":
				timedOut++
			case op.outcome != "ok":
				failed++
				errorsSeen[stream+": "+op.outcome]++
			case op.latency > blockedAfter:
				blocked++
			}
		}
		slices.Sort(latencies)
		p50, longest := time.Duration(0), time.Duration(0)
		if len(latencies) > 0 {
			p50, longest = latencies[len(latencies)/2], latencies[len(latencies)-1]
		}
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%d\t%s\t%s\t%s\n", stream, len(latencies), blocked, timedOut, failed,
			p50.Round(10*time.Microsecond), ms(longest), ms(r.longestStall(stream)))
	}
	_ = tw.Flush()
	for _, e := range slices.Sorted(maps.Keys(errorsSeen)) {
		fmt.Fprintf(out, "error %dx %s\n", errorsSeen[e], e)
	}
	fmt.Fprintln(out)
}

// longestStall is the longest time stream went without a statement
// succeeding quickly: from the start of the first blocked, timed-out or
// failed statement of a run of them to the end of the last; what a user of
// the application waits, across its retries.
func (r *lockStudyResult) longestStall(stream string) time.Duration {
	var longest time.Duration
	var stallStart time.Time
	for _, op := range r.ops {
		if op.stream != stream {
			continue
		}
		bad := op.outcome != "ok" || op.latency > blockedAfter
		if bad && stallStart.IsZero() {
			stallStart = op.start
		}
		if bad {
			longest = max(longest, op.start.Add(op.latency).Sub(stallStart))
		} else {
			stallStart = time.Time{}
		}
	}
	return longest
}

// ms formats d in milliseconds.
func ms(d time.Duration) string {
	return fmt.Sprintf("%d ms", d.Milliseconds())
}
