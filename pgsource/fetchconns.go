package pgsource

import (
	"context"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// heldConnMaxAge bounds how long a fetch connection is kept out of the
// pool: older, it goes back after its fetch, so the pool's
// MaxConnLifetime (which pgxpool applies on release), Reset and health
// checks reach it within a minute.
const heldConnMaxAge = time.Minute

// fetchConns keeps the connections a source fetches on between its
// fetches, at most one per eighth of the pool's MaxConns and at most
// maxFetchesInFlight.
//
// Why: FetchLeases is a large statement. A connection parses it (about
// 5 ms) and plans it (3 ms idle, 4–10 ms under load, five custom plans
// and a generic one per plan class, repo/plan_class.go) the first time
// it runs it in a class, and again after each ANALYZE of its tables.
// Fetching on whichever connection the pool hands out (the last one
// released: a producer's or the completer's) spread that over every
// connection of the pool, each fetch on the critical path of the
// attempts it leases. Kept here, the statement is parsed and planned on
// two connections. The bound leaves a small pool (pgxpool's default is
// max(4, NumCPU)) to the rest: below eight connections a source keeps
// none and fetches as before.
type fetchConns struct {
	pool *pgxpool.Pool
	keep int

	mu   sync.Mutex
	idle []heldConn
}

type heldConn struct {
	conn  *pgxpool.Conn
	since time.Time
}

func newFetchConns(pool *pgxpool.Pool) *fetchConns {
	return &fetchConns{pool: pool, keep: keptFetchConns(pool.Config().MaxConns)}
}

// keptFetchConns is how many fetch connections a source keeps out of a
// pool of maxConns.
func keptFetchConns(maxConns int32) int {
	return min(maxFetchesInFlight, int(maxConns)/8)
}

// acquire returns a kept connection, or one from the pool.
func (f *fetchConns) acquire(ctx context.Context) (heldConn, error) {
	f.mu.Lock()
	if n := len(f.idle); n > 0 {
		h := f.idle[n-1]
		f.idle = f.idle[:n-1]
		f.mu.Unlock()
		return h, nil
	}
	f.mu.Unlock()
	c, err := f.pool.Acquire(ctx)
	if err != nil {
		return heldConn{}, err
	}
	return heldConn{conn: c, since: time.Now()}, nil
}

// put keeps h for the next fetch, or releases it to the pool after a
// failed fetch (the connection may be broken; pgxpool closes it if so),
// when it is old, or when enough are kept.
func (f *fetchConns) put(h heldConn, fetchErr error) {
	if fetchErr == nil && time.Since(h.since) < heldConnMaxAge {
		f.mu.Lock()
		if len(f.idle) < f.keep {
			f.idle = append(f.idle, h)
			f.mu.Unlock()
			return
		}
		f.mu.Unlock()
	}
	h.conn.Release()
}

// close releases the kept connections; Run calls it once its fetches
// have returned.
func (f *fetchConns) close() {
	f.mu.Lock()
	idle := f.idle
	f.idle = nil
	f.mu.Unlock()
	for _, h := range idle {
		h.conn.Release()
	}
}
