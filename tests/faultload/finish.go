package faultload

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/knowledgefs/kfsdb/kfstype"
	"github.com/knowledgefs/kfsdb/observe"
	"github.com/knowledgefs/kfsdb/tests/testfactory"
)

// checkTimeout bounds the checks after the drain.
const checkTimeout = 5 * time.Minute

// Finish lets the producers start the rest of their documents, stops
// them and the probe, waits until no attempt is live (giving up when none
// ends for Config.Stall, or after Config.DrainTimeout), stops the workers
// and the relay, and checks every row. It fails nothing: what it found is
// in the Report. Call it once, after the faults.
func (r *Run) Finish(ctx context.Context) *Report {
	rep := &Report{Path: r.cfg.Path, Terminal: map[kfstype.RunState]int{}, StartErrorOutcome: map[string]int{}, RTOStart: -1, RTOComplete: -1}
	if !r.finished.CompareAndSwap(false, true) {
		rep.Problems.add("Finish called twice")
		return rep
	}
	select {
	case <-r.produced:
	case <-ctx.Done():
		rep.Problems.addf("the producers did not finish: %v", ctx.Err())
	}
	r.stopSide()
	<-r.produced
	if r.probe != nil {
		r.probe.wait()
	}

	dctx, cancel := context.WithTimeout(ctx, r.cfg.DrainTimeout)
	err := waitProgress(dctx, r.cfg.Stall, r.live, "waiting for every attempt to end")
	cancel()
	if err != nil {
		rep.Problems.addf("%v; live attempts: %s; metrics: %v", err, r.liveStates(ctx), r.metrics.Snapshot())
	}
	rep.Duration = time.Since(r.started)
	for _, e := range r.stopRun() {
		rep.Problems.add(e)
	}

	cctx, cancel := context.WithTimeout(ctx, checkTimeout)
	defer cancel()
	r.verify(cctx, rep)
	return rep
}

// live polls the live attempts: progress is their count, negated.
func (r *Run) live(ctx context.Context) (int, bool, bool) {
	cctx, cancel := context.WithTimeout(ctx, r.cfg.CallTimeout)
	defer cancel()
	var n int
	if err := r.check.QueryRow(cctx, `SELECT count(*) FROM document_compilation_attempts WHERE active_slot IS NOT NULL`).Scan(&n); err != nil {
		return 0, false, false
	}
	return -n, n == 0, true
}

// liveStates describes the live attempts by run state and outbox status.
func (r *Run) liveStates(ctx context.Context) string {
	cctx, cancel := context.WithTimeout(ctx, r.cfg.CallTimeout)
	defer cancel()
	rows, err := r.check.Query(cctx, `SELECT a.run_state || '/' || coalesce(o.status, 'no outbox'), count(*)
		FROM document_compilation_attempts a LEFT JOIN document_compilation_outbox o ON o.attempt_id = a.id
		WHERE a.active_slot IS NOT NULL GROUP BY 1`)
	if err != nil {
		return err.Error()
	}
	defer rows.Close()
	m := map[string]int{}
	for rows.Next() {
		var s string
		var n int
		if err := rows.Scan(&s, &n); err != nil {
			return err.Error()
		}
		m[s] = n
	}
	return counts(m)
}

// versionKey is a document version, the identity of a Start.
type versionKey struct {
	tenant  string
	asset   uuid.UUID
	version int32
}

// row is an attempt as the checks read it.
type row struct {
	key   versionKey
	state kfstype.RunState
}

// verify reads every attempt and fills in rep.
func (r *Run) verify(ctx context.Context, rep *Report) {
	byID, byVersion, err := r.readAttempts(ctx)
	if err != nil {
		rep.Problems.addf("read the attempts: %v", err)
		return
	}
	appWrites, err := r.readAppWrites(ctx)
	if err != nil {
		rep.Problems.addf("read the app writes: %v", err)
	}

	r.mu.Lock()
	defer r.mu.Unlock()
	for _, d := range r.docs {
		key := d.key()
		n := len(byVersion[key])
		switch {
		case d.id != uuid.Nil:
			rep.Attempts++
			if d.inTx {
				rep.InTx++
			}
			a, ok := byID[d.id]
			switch {
			case !ok:
				rep.Missing++
				rep.Problems.addf("attempt %s: Start returned it, the database does not have it", d.id)
			case !a.state.Terminal():
				rep.NotTerminal++
				rep.Problems.addf("attempt %s: still %s after the drain", d.id, a.state)
			default:
				rep.Terminal[a.state]++
			}
		case d.gaveUp:
			rep.StartsGaveUp++
			rep.Problems.addf("document %v: no Start succeeded (first error: %s)", key, d.firstErr)
		default:
			rep.NotProduced++
		}
		if d.errored {
			rep.StartErrors++
			rep.StartErrorOutcome[existence(n)]++
		}
		if d.inTx && (d.id != uuid.Nil || d.errored) {
			if appWrites != nil && appWrites[key] != (n > 0) {
				rep.AppWriteMismatches++
				rep.Problems.addf("document %v: app write %v, %d attempts: not committed together", key, appWrites[key], n)
			}
		}
	}
	rep.Lost = rep.Missing + rep.NotTerminal
	for key, ids := range byVersion {
		if len(ids) > 1 {
			rep.Duplicated++
			rep.Problems.addf("document %v: %d attempts %v", key, len(ids), ids)
		}
	}
	for id, n := range r.completed {
		if n > 1 {
			rep.CompletedTwice++
			rep.Problems.addf("attempt %s: completion acknowledged to workers %d times", id, n)
		}
	}
	r.faultsReport(rep, byID, byVersion)

	// The checks below read per attempt; not under r.mu's hold for long
	// on a fast database, and nothing else runs by now.
	r.checkRows(ctx, rep, byID)

	rep.Transient = r.errs.transient.Load()
	r.errs.mu.Lock()
	rep.NonRetryable, rep.ReadAsState = r.errs.nonRetryable, r.errs.readAsState
	r.errs.mu.Unlock()
	rep.LeasesLost, rep.Retried, rep.Stale = r.metrics.Get(observe.LeasesLost), r.metrics.Get(observe.Retried), r.metrics.Get(observe.StaleDeliveries)
	rep.HandlersStopped = r.stopped.Load()
	r.logs.state.mu.Lock()
	rep.RuntimeTransient, rep.RuntimeNonRetryable = r.logs.state.transient, r.logs.state.other
	r.logs.state.mu.Unlock()
	if r.probe != nil {
		rep.ProbeCalls = r.probe.calls.Load()
		r.probe.mu.Lock()
		rep.ProbeWrong = r.probe.wrong
		r.probe.mu.Unlock()
	}
}

// checkRows checks the invariants of every attempt and the lease audit.
func (r *Run) checkRows(ctx context.Context, rep *Report, byID map[uuid.UUID]row) {
	for id := range byID {
		if f := collect(func(t testing.TB) { testfactory.RequireInvariants(ctx, t, r.check, id) }); len(f) > 0 {
			rep.InvariantViolations++
			rep.Problems.addf("attempt %s: %s", id, f[0])
		}
	}
	var ivs map[uuid.UUID][]testfactory.LeaseInterval
	if f := collect(func(t testing.TB) { ivs = testfactory.ReadLeaseIntervals(ctx, t, r.check) }); len(f) > 0 {
		rep.Problems.addf("read the lease audit: %s", f[0])
	}
	for _, iv := range ivs {
		rep.Leases += len(iv)
		for _, o := range testfactory.Overlaps(iv) {
			rep.OverlappingLeases++
			rep.Problems.add(o)
		}
	}
	var late []string
	if f := collect(func(t testing.TB) { rep.FencedWrites, late = testfactory.CheckFencedWrites(ctx, t, r.check) }); len(f) > 0 {
		rep.Problems.addf("read the lease audit: %s", f[0])
	}
	rep.UnfencedWrites = len(late)
	for _, l := range late {
		rep.Problems.add(l)
	}
}

// faultsReport measures each fault's RTO and what became of what was in
// flight at it. Under r.mu.
func (r *Run) faultsReport(rep *Report, byID map[uuid.UUID]row, byVersion map[versionKey][]uuid.UUID) {
	// The first success of a call made after the fault: one made before
	// may have committed before it and returned just after.
	first := func(spans []span, after time.Time) time.Duration {
		best := time.Duration(-1)
		for _, s := range spans {
			if d := s.ended.Sub(after); !s.began.Before(after) && (best < 0 || d < best) {
				best = d
			}
		}
		return best
	}
	for _, m := range r.faults {
		f := Fault{Name: m.name, At: m.at, RTOStart: first(r.startOKs, m.at), RTOComplete: first(r.completions, m.at), InFlight: map[string]int{}}
		for _, d := range m.starts {
			f.InFlight["start/"+existence(len(byVersion[d.key()]))]++
		}
		for _, id := range m.attempts {
			if a, ok := byID[id]; ok {
				f.InFlight["attempt/"+string(a.state)]++
			} else {
				f.InFlight["attempt/missing"]++
			}
			if r.completed[id] > 1 {
				f.InFlight["attempt/completed_twice"]++
			}
		}
		rep.Faults = append(rep.Faults, f)
		rep.RTOStart, rep.RTOComplete = f.RTOStart, f.RTOComplete
	}
}

// readAttempts reads every attempt but the probe's.
func (r *Run) readAttempts(ctx context.Context) (map[uuid.UUID]row, map[versionKey][]uuid.UUID, error) {
	probe := uuid.Nil
	if r.probe != nil {
		probe = r.probe.id
	}
	rows, err := r.check.Query(ctx, `SELECT id, tenant_id, document_asset_id, document_version, run_state
		FROM document_compilation_attempts WHERE id <> $1 ORDER BY id`, probe)
	if err != nil {
		return nil, nil, err
	}
	defer rows.Close()
	byID := map[uuid.UUID]row{}
	byVersion := map[versionKey][]uuid.UUID{}
	for rows.Next() {
		var id uuid.UUID
		var a row
		if err := rows.Scan(&id, &a.key.tenant, &a.key.asset, &a.key.version, &a.state); err != nil {
			return nil, nil, err
		}
		byID[id] = a
		byVersion[a.key] = append(byVersion[a.key], id)
	}
	return byID, byVersion, rows.Err()
}

// readAppWrites reads the app's own writes.
func (r *Run) readAppWrites(ctx context.Context) (map[versionKey]bool, error) {
	rows, err := r.check.Query(ctx, `SELECT tenant_id, document_asset_id, document_version FROM faultload_app_writes`)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := map[versionKey]bool{}
	for rows.Next() {
		var k versionKey
		if err := rows.Scan(&k.tenant, &k.asset, &k.version); err != nil {
			return nil, err
		}
		out[k] = true
	}
	return out, rows.Err()
}

// existence names what n attempts of a document version are to a Start
// that errored: none, one, or a duplicate.
func existence(n int) string {
	switch n {
	case 0:
		return "absent"
	case 1:
		return "exists_once"
	}
	return "duplicated"
}

func (d *docState) key() versionKey {
	return versionKey{d.params.TenantID, d.params.DocumentAssetID, d.params.DocumentVersion}
}

// String names the document version.
func (k versionKey) String() string { return fmt.Sprintf("%s/%s v%d", k.tenant, k.asset, k.version) }
