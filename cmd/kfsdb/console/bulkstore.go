package console

import (
	"sync"
	"time"

	"github.com/knowledgefs/kfsdb/cmd/kfsdb/ops"
)

// maxBulkEntries bounds the dry runs awaiting confirmation and the results
// kept for their pages, per console process: memory stays bounded (a dry
// run holds up to Config.BulkMax ids) whatever a client asks.
const maxBulkEntries = 16

// bulkState is where a bulk action is.
type bulkState int

const (
	bulkPlanned bulkState = iota // dry run shown, not confirmed
	bulkRunning                  // confirmed, batches running
	bulkDone                     // ran; outcome set
)

// bulkEntry is one bulk action: its dry run, then its outcome.
type bulkEntry struct {
	principal string // the principal's key: only its maker confirms or sees it
	tenant    string
	plan      *ops.BulkPlan
	created   time.Time
	expires   time.Time
	state     bulkState
	outcome   *bulkOutcome
}

// bulkStore holds the console's bulk actions, by a random id that the
// confirmation form carries. Like sessions and CSRF tokens, they die with
// the process.
type bulkStore struct {
	mu sync.Mutex
	m  map[string]*bulkEntry
}

// put stores a dry run until csrfTTL from now and returns its id. A full
// store drops expired entries, then the oldest one.
func (b *bulkStore) put(principal, tenant string, plan *ops.BulkPlan, now time.Time) string {
	id := randomID()
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.m == nil {
		b.m = map[string]*bulkEntry{}
	}
	if len(b.m) >= maxBulkEntries {
		var oldest string
		for k, e := range b.m {
			if !now.Before(e.expires) && e.state != bulkRunning {
				delete(b.m, k)
			} else if oldest == "" || e.created.Before(b.m[oldest].created) {
				oldest = k
			}
		}
		if len(b.m) >= maxBulkEntries {
			delete(b.m, oldest) // a running one finishes unrecorded: its audit lines are written
		}
	}
	b.m[id] = &bulkEntry{principal: principal, tenant: tenant, plan: plan, created: now, expires: now.Add(csrfTTL)}
	return id
}

// take claims a dry run for execution: its maker, once, before it
// expires. why says why not.
func (b *bulkStore) take(id, principal string, now time.Time) (e *bulkEntry, why string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	e = b.m[id]
	switch {
	case e == nil || e.principal != principal:
		return nil, "no such dry run in this console (it expired, the console restarted, or another login made it)"
	case e.state != bulkPlanned:
		return nil, "this bulk action was already confirmed: a form is good for one execution"
	case !now.Before(e.expires):
		delete(b.m, id)
		return nil, "the dry run expired"
	}
	e.state = bulkRunning
	return e, ""
}

// finish records a bulk action's outcome, kept for its page until
// csrfTTL from now; the plan's targets are dropped.
func (b *bulkStore) finish(id string, out *bulkOutcome, now time.Time) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if e := b.m[id]; e != nil {
		e.state, e.outcome, e.expires = bulkDone, out, now.Add(csrfTTL)
		e.plan.Targets, e.plan.Sample = nil, nil
	}
}

// done returns a finished bulk action for its maker.
func (b *bulkStore) done(id, principal string, now time.Time) *bulkEntry {
	b.mu.Lock()
	defer b.mu.Unlock()
	e := b.m[id]
	if e == nil || e.principal != principal || e.state != bulkDone || !now.Before(e.expires) {
		return nil
	}
	return e
}
