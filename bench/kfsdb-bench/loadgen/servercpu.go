package loadgen

import "time"

// ServerCPUTime is the database server's CPU time so far, read from the
// file EnvServerCPUFile names; -1 when it is unset or unreadable. The
// fleet benchmark (tests/bench, make bench-fleet) reads it around its
// windows, as Run does.
func ServerCPUTime() time.Duration { return serverCPUTime() }
