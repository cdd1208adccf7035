// Package faultload runs a load of compilation attempts on one delivery
// path of kfsdb against a real PostgreSQL, lets the caller inject faults
// into it (a killed backend, a restarted, crashed or frozen server, a
// primary failover) and checks what came of every attempt. It is not a
// test package: tests/faults runs the existing faults through it on every
// path, and the failover tests run the same load across a promotion.
//
// A run seeds documents, starts Upfront attempts at once, runs the path's
// workers (and relay) with real heartbeats and leases, and has Producers
// start the other Documents at a steady rate, some inside the app's own
// transaction (begin, the app's own write, Start on the transaction,
// commit). A Start that returns an error is recorded and retried with the
// same identity: the same document version and publication generation,
// after reading whether the first try committed after all (Start finds a
// live attempt by itself, but not one that already ended), so a retry
// never makes a second attempt. Every worker outcome is seen through a
// worker.Tracer, so an attempt completed twice (two acknowledged
// completions, one of them lost by a failover) is counted.
//
// Finish stops the producers, waits until no attempt is live (the wait
// fails only when nothing ends for Config.Stall), stops the workers and
// checks every row: the pairing invariants, the lease audit (no two valid
// leases of one attempt overlapped, no outcome written under an expired
// lease), lost and doubled attempts, what became of the Starts that
// errored, and the RTO after each fault. It counts; it never fails the
// test itself, because a run across an asynchronous failover expects
// losses. Report.Require fails a test that expects none.
//
// Usage (dbURL names a migrated database the run may use alone; it may be
// a multi-host URL with target_session_attrs=read-write):
//
//	run := faultload.Start(ctx, t, &faultload.Config{
//		Path: faultload.DirectListen, URL: dbURL, Documents: 300, Upfront: 100,
//		InTxFraction: 0.3, LeaseDuration: 2 * time.Second,
//	})
//	require.NoError(t, run.WaitCompleted(ctx, 50))
//	run.MarkFault("kill primary")
//	killPrimary() // the HA tool promotes the standby meanwhile
//	rep := run.Finish(ctx)
//	t.Log(rep.Summary("sync"))
//	// failover: path=direct-listen sync=sync attempts=300 lost=0 completed_twice=0 overlapping_leases=0 rto_start_ms=… rto_complete_ms=…
//	rep.Require(t) // nothing lost, nothing done twice, every check clean
//
// Every wait is bounded by a context or a Config duration; no call waits
// on a server that does not answer for longer than Config.CallTimeout.
package faultload
