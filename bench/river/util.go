package main

import (
	"context"
	"os"
	"runtime/debug"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5/pgxpool"
)

// serverCPU reads the database server's CPU time so far, in ns, from the
// file KFS_BENCH_CPU_FILE names (a cgroup's cpuacct.usage, or cpu.stat's
// usage_usec line); -1 when unset or unreadable. The same as the kfsdb
// load driver reads, so both report CPU per item the same way.
func serverCPU() int64 {
	path := os.Getenv("KFS_BENCH_CPU_FILE")
	if path == "" {
		return -1
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return -1
	}
	text := string(b)
	for _, line := range strings.Split(text, "\n") {
		if v, ok := strings.CutPrefix(line, "usage_usec "); ok {
			n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
			if err != nil {
				return -1
			}
			return n * 1000
		}
	}
	n, err := strconv.ParseInt(strings.TrimSpace(text), 10, 64)
	if err != nil {
		return -1
	}
	return n
}

// riverVersion is River's module version from the build info.
func riverVersion() string {
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, d := range bi.Deps {
			if d.Path == "github.com/riverqueue/river" {
				return d.Version
			}
		}
	}
	return "unknown"
}

// warmPool opens every connection pool may hold, as the kfsdb load driver
// does (loadgen's warmPool), so neither side's window pays for connecting.
func warmPool(ctx context.Context, pool *pgxpool.Pool) error {
	conns := make([]*pgxpool.Conn, 0, pool.Config().MaxConns)
	defer func() {
		for _, c := range conns {
			c.Release()
		}
	}()
	for range pool.Config().MaxConns {
		c, err := pool.Acquire(ctx)
		if err != nil {
			return err
		}
		conns = append(conns, c)
		if err := c.Ping(ctx); err != nil {
			return err
		}
	}
	return nil
}
