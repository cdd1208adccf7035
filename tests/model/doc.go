// Package model holds kfsdb's model-based test: pgregory.net/rapid draws
// random sequences of every transition of package repo, valid and invalid,
// with time moved through the repo's clock override, and runs each one
// against a real PostgreSQL and against a plain-Go reference model of the
// compilation state machine (/work/shared/spec/compilation-state-machine.md).
// Two commands give another actor its own clock: ReclaimDuringHeartbeat
// (a relay past a lease's expiry reclaims its row, then the lease holder
// heartbeats with a clock still before the expiry) and
// DeadLetterWhileRunning (the same reclaim, then a release with the
// dispatch attempts used up, before or after the expiry).
// After every step the stored rows must equal the model's prediction field
// by field and satisfy every invariant, and every call must return the
// error class the model predicts.
//
// The default run (`go test ./model`) runs 1,000 sequences; -model.soak or
// KFS_MODEL_CHECKS=N runs a longer soak, and -rapid.checks=N overrides
// both.
package model
