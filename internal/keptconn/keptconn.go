// Package keptconn keeps a few of a pool's connections out of it between
// uses, for a source's fetches (FetchLeases, the delivery path's largest
// statement).
//
// Why: a connection parses and plans a statement the first time it runs
// it, again after each ANALYZE of the tables it reads, and for
// FetchLeases once per plan class of those tables (repo/plan_class.go);
// its first execution also loads what the executor needs (the tables'
// indexes, CHECK constraints, foreign-key checks). FetchLeases takes about
// 5 ms to parse and 3–10 ms per plan. Run on whichever connection the
// pool hands out (the one last released: a producer's, a slot's), that
// work is done on every connection of the pool, each time on the critical
// path of the attempts in the statement. Kept, it is done on these few.
//
// Only for statements with plan classes: a kept connection also keeps its
// generic plans, built at a statement's sixth run on the tables' sizes
// then, until an ANALYZE. The worker's completer on a kept connection
// (tried) kept a CompleteMany plan built on small tables: 16.6–19.7 ms and
// 3,230–3,756 buffers per call in unpaced runs, against 2.2–2.4 ms and
// 447–502 on the pool's connections, and a third less throughput.
package keptconn

import (
	"context"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// MaxAge bounds how long a connection is kept out of the pool: older, it
// goes back after its use, so the pool's MaxConnLifetime (which pgxpool
// applies on release), Reset and health checks reach it within a minute.
const MaxAge = time.Minute

// PerEight is how many connections a loop keeps out of a pool of maxConns:
// one for every eight, at most most. A small pool (pgxpool's default is
// max(4, NumCPU)) keeps none and is left to the rest.
func PerEight(maxConns int32, most int) int {
	return min(most, int(maxConns)/8)
}

// Set keeps up to a number of connections of a pool between uses. Safe
// for concurrent use.
type Set struct {
	pool    *pgxpool.Pool
	keep    int
	generic bool

	mu   sync.Mutex
	idle []*Conn
}

// Conn is a connection of a Set's pool, kept or newly acquired.
type Conn struct {
	*pgxpool.Conn
	since time.Time
	// generic: plan_cache_mode is set on the session, to be reset before
	// the connection goes back.
	generic bool
}

// New returns a Set keeping up to keep connections of pool (none: every
// Acquire takes one from the pool and every Put releases it).
//
// With genericPlans (and keep > 0), a connection's session plans its
// prepared statements generically while the Set has it (plan_cache_mode =
// force_generic_plan, reset before it goes back): the first runs of a
// statement in a new plan class are not five custom plans of 3–10 ms each,
// and the plan cache cannot settle on re-planning every run (seen: 1,074
// plans in 1,760 fetches on one kept connection, 4.3 ms each). Pass it only
// for a session of the connection's own: through PgBouncer in transaction
// pooling the setting would stay on a server session other clients share.
func New(pool *pgxpool.Pool, keep int, genericPlans bool) *Set {
	return &Set{pool: pool, keep: keep, generic: genericPlans && keep > 0}
}

// Keep is how many connections s keeps; GenericPlans, whether their
// sessions plan generically.
func (s *Set) Keep() int { return s.keep }

// GenericPlans: see New.
func (s *Set) GenericPlans() bool { return s.generic }

// Acquire returns a kept connection, or one from the pool.
func (s *Set) Acquire(ctx context.Context) (*Conn, error) {
	s.mu.Lock()
	if n := len(s.idle); n > 0 {
		c := s.idle[n-1]
		s.idle = s.idle[:n-1]
		s.mu.Unlock()
		return c, nil
	}
	s.mu.Unlock()
	c, err := s.pool.Acquire(ctx)
	if err != nil {
		return nil, err
	}
	kc := &Conn{Conn: c, since: time.Now()}
	if s.generic {
		if _, err := c.Exec(ctx, "SET plan_cache_mode = force_generic_plan"); err != nil {
			c.Release()
			return nil, err
		}
		kc.generic = true
	}
	return kc, nil
}

// Put keeps c for the next use, or releases it to the pool: after a
// failed use or once closed (the connection may be broken; pgxpool
// destroys a closed one), when it is older than MaxAge, or when enough are
// kept.
func (s *Set) Put(c *Conn, useErr error) {
	if useErr == nil && !c.Conn.Conn().IsClosed() && time.Since(c.since) < MaxAge {
		s.mu.Lock()
		if len(s.idle) < s.keep {
			s.idle = append(s.idle, c)
			s.mu.Unlock()
			return
		}
		s.mu.Unlock()
	}
	s.release(c)
}

// release gives c back to the pool as the pool gave it: a session whose
// setting cannot be reset is closed (pgxpool then destroys it).
func (s *Set) release(c *Conn) {
	if c.generic && !c.Conn.Conn().IsClosed() {
		ctx, cancel := context.WithTimeout(context.Background(), resetTimeout)
		if _, err := c.Exec(ctx, "RESET plan_cache_mode"); err != nil {
			_ = c.Conn.Conn().Close(ctx)
		}
		cancel()
	}
	c.Release()
}

// resetTimeout bounds the RESET before a connection goes back.
const resetTimeout = 5 * time.Second

// Close releases the kept connections. Call it once nothing uses the Set.
func (s *Set) Close() {
	s.mu.Lock()
	idle := s.idle
	s.idle = nil
	s.mu.Unlock()
	for _, c := range idle {
		s.release(c)
	}
}
