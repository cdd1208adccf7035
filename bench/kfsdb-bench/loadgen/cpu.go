package loadgen

import (
	"os"
	"strconv"
	"strings"
	"time"
)

// EnvServerCPUFile names the environment variable that points at the
// database server's CPU counter: a cgroup v1 cpuacct.usage (ns) or a
// cgroup v2 cpu.stat (its usage_usec line). scripts/bench-lifecycle.sh
// sets it to the server container's; bench/river reads the same file, so
// both report CPU per item the same way.
const EnvServerCPUFile = "KFS_BENCH_CPU_FILE"

// serverCPUTime is the server's CPU time so far from EnvServerCPUFile; -1
// when it is unset or unreadable.
func serverCPUTime() time.Duration {
	path := os.Getenv(EnvServerCPUFile)
	if path == "" {
		return -1
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return -1
	}
	text := string(b)
	for line := range strings.SplitSeq(text, "\n") {
		if v, ok := strings.CutPrefix(line, "usage_usec "); ok {
			us, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
			if err != nil {
				return -1
			}
			return time.Duration(us) * time.Microsecond
		}
	}
	ns, err := strconv.ParseInt(strings.TrimSpace(text), 10, 64)
	if err != nil {
		return -1
	}
	return time.Duration(ns)
}
