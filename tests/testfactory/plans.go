package testfactory

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// AutoExplainToNotices are the settings, for a session that has run LOAD
// 'auto_explain', that send every statement's plan (analyzed, with its
// buffers, as JSON) back to the client as a notice, for PlanNotices.
var AutoExplainToNotices = []string{
	"SET auto_explain.log_min_duration = 0", "SET auto_explain.log_analyze = on",
	"SET auto_explain.log_buffers = on", "SET auto_explain.log_timing = off", "SET auto_explain.log_format = json",
	"SET auto_explain.log_level = notice",
}

// PlanNotices collects auto_explain's JSON plans sent as notices: set
// OnNotice as a pgx ConnConfig's OnNotice. Safe for concurrent use.
type PlanNotices struct {
	mu    sync.Mutex
	plans []string
}

// OnNotice is a pgconn.NoticeHandler keeping the plans.
func (p *PlanNotices) OnNotice(_ *pgconn.PgConn, n *pgconn.Notice) {
	if _, plan, ok := strings.Cut(n.Message, "plan:"); ok {
		p.mu.Lock()
		p.plans = append(p.plans, plan)
		p.mu.Unlock()
	}
}

// Reset forgets the plans kept so far.
func (p *PlanNotices) Reset() {
	p.mu.Lock()
	p.plans = nil
	p.mu.Unlock()
}

// Buffers sums the shared buffers (hit + read) of the plans whose query
// text starts with prefix, and says whether there was one.
func (p *PlanNotices) Buffers(prefix string) (int64, bool) {
	plans := p.matching(prefix)
	var sum int64
	for _, n := range plans {
		sum += n.SharedHit + n.SharedRead
	}
	return sum, len(plans) > 0
}

// IndexLoops counts, in the plans whose query text starts with prefix, the
// executions (actual loops) of the plan nodes that scan each index: an
// index a node would have scanned but never did counts 0.
func (p *PlanNotices) IndexLoops(prefix string) map[string]int64 {
	loops := map[string]int64{}
	for _, n := range p.matching(prefix) {
		n.indexLoops(loops)
	}
	return loops
}

// matching returns the top plan nodes of the plans whose query text starts
// with prefix.
func (p *PlanNotices) matching(prefix string) []planNode {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []planNode
	for _, raw := range p.plans {
		var e struct {
			QueryText string   `json:"Query Text"`
			Plan      planNode `json:"Plan"`
		}
		if json.Unmarshal([]byte(raw), &e) != nil || !strings.HasPrefix(strings.TrimSpace(e.QueryText), prefix) {
			continue
		}
		out = append(out, e.Plan)
	}
	return out
}

// planNode is what PlanNotices reads of an auto_explain JSON plan node.
type planNode struct {
	SharedHit  int64      `json:"Shared Hit Blocks"`
	SharedRead int64      `json:"Shared Read Blocks"`
	IndexName  string     `json:"Index Name"`
	Loops      int64      `json:"Actual Loops"`
	Plans      []planNode `json:"Plans"`
}

func (n *planNode) indexLoops(into map[string]int64) {
	if n.IndexName != "" {
		into[n.IndexName] += n.Loops
	}
	for i := range n.Plans {
		n.Plans[i].indexLoops(into)
	}
}

// ExplainOnConnect makes every connection of cfg's pool load auto_explain
// with AutoExplainToNotices (which needs a superuser) and send its plans
// to plans.
func ExplainOnConnect(cfg *pgxpool.Config, plans *PlanNotices) {
	cfg.ConnConfig.OnNotice = plans.OnNotice
	cfg.AfterConnect = func(ctx context.Context, c *pgx.Conn) error {
		for _, s := range append([]string{"LOAD 'auto_explain'"}, AutoExplainToNotices...) {
			if _, err := c.Exec(ctx, s); err != nil {
				return fmt.Errorf("auto_explain (needs a superuser): %w", err)
			}
		}
		return nil
	}
}

// FreezeStatistics turns autovacuum off on the attempt and outbox tables
// and VACUUM ANALYZEs the database: the statistics stay as they are now
// through a measure (an ANALYZE would also invalidate the plans that
// connections cache meanwhile).
func FreezeStatistics(ctx context.Context, db *pgxpool.Pool) error {
	for _, s := range []string{
		`ALTER TABLE document_compilation_attempts SET (autovacuum_enabled = false)`,
		`ALTER TABLE document_compilation_outbox SET (autovacuum_enabled = false)`,
		`VACUUM ANALYZE`,
	} {
		if _, err := db.Exec(ctx, s); err != nil {
			return fmt.Errorf("statistics: %w", err)
		}
	}
	return nil
}
