package bench

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

// churnTable is one table's figures at the end of a minute.
type churnTable struct {
	Name                      string
	Total, Heap, Indexes      int64 // pg_total_relation_size, pg_relation_size, pg_indexes_size
	Live, Dead                int64 // n_live_tup, n_dead_tup
	Autovacuums, Autoanalyzes int64 // autovacuum_count, autoanalyze_count
	LastAutovacuum            string
}

// churnMinute is one side's minute: the attempts whose completion
// committed in it and their start → succeeded latency at the commit, and
// the tables and the claim statement's plan at its end.
type churnMinute struct {
	Variant, Side string
	Minute        int
	End           time.Time // the database's clock
	Held          bool
	Completed     int64
	P50, P99, Max float64 // ms
	Tables        []churnTable
	Plan          string // a hash of the plan's text, "" when unavailable
	PlanChanged   bool
}

// churnShape is what the sampler reads in one side's database.
type churnShape struct {
	tables []string
	// ready is true once an item has completed (the load has begun).
	ready string
	// latency returns count, p50, p99 and max (ms) of the items whose
	// completion committed in [$1, $2), start → succeeded at the commit:
	// pg_xact_commit_timestamp(xmin) of the completed row (the completing
	// transaction's, as nothing updates the row after it) minus its
	// created_at. The row's own completion stamp (kfsdb's and the floor's
	// completed_at, River's finalized_at: taken before the commit) only
	// narrows the scan to an index range; a commit more than a minute
	// after it would be missed.
	latency string
	// claim finds the claim statement's text in pg_stat_activity: a
	// LIKE pattern pair.
	claim [2]string
}

const churnLatencyPercentiles = `SELECT count(*), coalesce(percentile_disc(0.5) WITHIN GROUP (ORDER BY ms), 0)::float8,
       coalesce(percentile_disc(0.99) WITHIN GROUP (ORDER BY ms), 0)::float8, coalesce(max(ms), 0)::float8
  FROM (SELECT extract(epoch FROM pg_xact_commit_timestamp(xmin) - created_at)::float8 * 1000 AS ms,
               pg_xact_commit_timestamp(xmin) AS committed `

// The seed's tables, for kfsdb and the floor alike; the tenants ($3) let
// the scan use (tenant_id, completed_at, id).
var churnSeedShape = churnShape{
	tables: []string{"document_compilation_attempts", "document_compilation_outbox"},
	ready:  `SELECT EXISTS (SELECT 1 FROM document_compilation_attempts WHERE run_state = 'succeeded')`,
	latency: churnLatencyPercentiles + `
          FROM document_compilation_attempts
         WHERE tenant_id = ANY(ARRAY(SELECT DISTINCT tenant_id FROM knowledge_spaces)) AND run_state = 'succeeded'
           AND completed_at >= $1::timestamptz - interval '1 minute' AND completed_at < $2) d
 WHERE committed >= $1 AND committed < $2`,
}

var churnShapes = map[string]churnShape{
	"postgres": withClaim(churnSeedShape, "%-- name: FetchLeases %", "%"),
	"floor":    withClaim(churnSeedShape, "%FOR UPDATE SKIP LOCKED%", "%document_compilation_outbox%"),
	"river": {
		tables: []string{"river_job"},
		ready:  `SELECT EXISTS (SELECT 1 FROM river_job WHERE state = 'completed')`,
		latency: churnLatencyPercentiles + `
          FROM river_job
         WHERE state = 'completed' AND finalized_at >= $1::timestamptz - interval '1 minute' AND finalized_at < $2) d
 WHERE committed >= $1 AND committed < $2`,
		claim: [2]string{"%-- name: JobGetAvailable %", "%"},
	},
}

func withClaim(s churnShape, like, alsoLike string) churnShape {
	s.claim = [2]string{like, alsoLike}
	return s
}

const churnTablesSQL = `SELECT relname, pg_total_relation_size(relid), pg_relation_size(relid), pg_indexes_size(relid),
       n_live_tup, n_dead_tup, autovacuum_count, autoanalyze_count,
       coalesce(to_char(last_autovacuum AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS"Z"'), '')
  FROM pg_stat_user_tables WHERE relname = ANY($1) ORDER BY array_position($1, relname::text)`

// churnSampler samples one side's database from outside, every minute.
type churnSampler struct {
	side, variant, url string
	shape              churnShape
	sampling           *churnSampling
	minute             time.Duration
	plansPath          string
	claimSQL, lastPlan string
}

func newChurnSampler(c *churnConfig, side, variant, url string, sampling *churnSampling) *churnSampler {
	return &churnSampler{
		side: side, variant: variant, url: url, shape: churnShapes[side], sampling: sampling,
		minute:    time.Duration(c.minuteSeconds) * time.Second,
		plansPath: filepath.Join(c.out, "plans-"+variant+"-"+side+".txt"),
	}
}

// churnSettle is how long after a minute's end its sample is read, so
// every completion committed in it is visible.
const churnSettle = 2 * time.Second

// run waits for the load to begin (the first completion), then samples
// sampling.minutes minutes from there, opening and closing the held
// snapshot at its minutes' boundaries. It stops early, with an error,
// when the side ends first.
func (s *churnSampler) run(ctx context.Context, finished <-chan struct{}) ([]churnMinute, error) {
	conn, err := pgx.Connect(ctx, s.url)
	if err != nil {
		return nil, err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	for {
		var ready bool
		// Errors until the side has migrated its database: wait on.
		if err := conn.QueryRow(ctx, s.shape.ready).Scan(&ready); err == nil && ready {
			break
		}
		select {
		case <-finished:
			return nil, errors.New("the side ended before its load began")
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(250 * time.Millisecond):
		}
	}
	var t0 time.Time
	if err := conn.QueryRow(ctx, `SELECT clock_timestamp()`).Scan(&t0); err != nil {
		return nil, err
	}
	local0 := time.Now()
	var holder *churnHolder
	defer func() { holder.release() }()
	hold := s.sampling.hold
	var out []churnMinute
	for k := range s.sampling.minutes {
		if k == hold.start {
			if holder, err = startChurnHolder(ctx, s.url, s.shape.tables[0]); err != nil {
				return out, err
			}
		}
		if k == hold.end {
			holder.release()
			holder = nil
		}
		select {
		case <-finished:
			return out, fmt.Errorf("the side ended after %d of %d minutes", k, s.sampling.minutes)
		case <-ctx.Done():
			return out, ctx.Err()
		case <-time.After(time.Until(local0.Add(time.Duration(k+1)*s.minute + churnSettle))):
		}
		m, err := s.sample(ctx, conn, k, t0.Add(time.Duration(k)*s.minute), t0.Add(time.Duration(k+1)*s.minute))
		if err != nil {
			return out, fmt.Errorf("minute %d: %w", k, err)
		}
		m.Held = hold.covers(k)
		out = append(out, m)
		if err := s.sampling.csv.write(&m); err != nil {
			return out, err
		}
		fmt.Printf("churn: %s %s minute %d%s: %d completed, p50 %.1f ms, p99 %.1f ms, %s, plan %s\n", s.variant, s.side, k,
			map[bool]string{true: " (held)"}[m.Held], m.Completed, m.P50, m.P99, churnTablesLine(m.Tables), m.Plan)
	}
	return out, nil
}

func (s *churnSampler) sample(ctx context.Context, conn *pgx.Conn, k int, from, to time.Time) (churnMinute, error) {
	m := churnMinute{Variant: s.variant, Side: s.side, Minute: k, End: to}
	if err := conn.QueryRow(ctx, s.shape.latency, from, to).Scan(&m.Completed, &m.P50, &m.P99, &m.Max); err != nil {
		return m, fmt.Errorf("latency: %w", err)
	}
	rows, err := conn.Query(ctx, churnTablesSQL, s.shape.tables)
	if err != nil {
		return m, fmt.Errorf("tables: %w", err)
	}
	for rows.Next() {
		var t churnTable
		if err := rows.Scan(&t.Name, &t.Total, &t.Heap, &t.Indexes, &t.Live, &t.Dead, &t.Autovacuums, &t.Autoanalyzes, &t.LastAutovacuum); err != nil {
			rows.Close()
			return m, fmt.Errorf("tables: %w", err)
		}
		m.Tables = append(m.Tables, t)
	}
	if err := rows.Err(); err != nil {
		return m, fmt.Errorf("tables: %w", err)
	}
	m.Plan, m.PlanChanged = s.plan(ctx, conn, k)
	return m, nil
}

// plan explains the claim statement as the server would run it prepared
// (EXPLAIN (GENERIC_PLAN), PostgreSQL 16 and later), its text taken from
// pg_stat_activity (whole only with track_activity_query_size large
// enough: scripts/bench-churn.sh starts its server so). A plan unlike the
// previous minute's is written to plans-<variant>-<side>.txt.
func (s *churnSampler) plan(ctx context.Context, conn *pgx.Conn, k int) (hash string, changed bool) {
	if s.claimSQL == "" {
		err := conn.QueryRow(ctx, `SELECT query FROM pg_stat_activity
			WHERE datname = current_database() AND pid <> pg_backend_pid() AND query LIKE $1 AND query LIKE $2 LIMIT 1`,
			s.shape.claim[0], s.shape.claim[1]).Scan(&s.claimSQL)
		if err != nil {
			return "", false // not seen yet (every connection busy with another statement)
		}
	}
	// The simple protocol: the text's $n stay placeholders of the
	// generic plan, with no arguments bound.
	results, err := conn.PgConn().Exec(ctx, "EXPLAIN (GENERIC_PLAN, COSTS OFF) "+s.claimSQL).ReadAll()
	var lines []string
	for _, r := range results {
		if err == nil {
			err = r.Err
		}
		for _, row := range r.Rows {
			lines = append(lines, string(row[0]))
		}
	}
	text := strings.Join(lines, "\n")
	if err != nil {
		text = "EXPLAIN failed: " + err.Error()
	}
	sum := sha256.Sum256([]byte(text))
	hash = hex.EncodeToString(sum[:6])
	if err != nil {
		hash = "error"
	}
	changed = s.lastPlan != "" && hash != s.lastPlan
	if hash != s.lastPlan {
		f, ferr := os.OpenFile(s.plansPath, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
		if ferr == nil {
			if s.lastPlan == "" {
				fmt.Fprintf(f, "== claim statement:\n%s\n\n", s.claimSQL)
			}
			fmt.Fprintf(f, "== %s %s minute %d: plan %s\n%s\n\n", s.variant, s.side, k, hash, text)
			_ = f.Close()
		}
	}
	s.lastPlan = hash
	return hash, changed
}

func churnTablesLine(ts []churnTable) string {
	parts := make([]string, len(ts))
	for i, t := range ts {
		parts[i] = fmt.Sprintf("%s %.1f MB (%d dead)", t.Name, float64(t.Total)/(1<<20), t.Dead)
	}
	return strings.Join(parts, ", ")
}

// churnHolder is the held variant's other session: a REPEATABLE READ
// transaction that read a row and keeps its snapshot, so vacuum cannot
// remove a row version that dies while it is open.
type churnHolder struct {
	conn *pgx.Conn
	tx   pgx.Tx
}

func startChurnHolder(ctx context.Context, url, table string) (*churnHolder, error) {
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return nil, fmt.Errorf("snapshot holder: %w", err)
	}
	tx, err := conn.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead})
	if err == nil {
		_, err = tx.Exec(ctx, "SELECT * FROM "+pgx.Identifier{table}.Sanitize()+" LIMIT 1")
	}
	if err != nil {
		_ = conn.Close(ctx)
		return nil, fmt.Errorf("snapshot holder: %w", err)
	}
	return &churnHolder{conn: conn, tx: tx}, nil
}

func (h *churnHolder) release() {
	if h == nil {
		return
	}
	ctx := context.Background()
	_ = h.tx.Rollback(ctx)
	_ = h.conn.Close(ctx)
}
