package bench

import (
	"context"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/knowledgefs/kfsdb/tests/loadgen"
)

// TestLoadgen runs the lifecycle load driver when KFS_LOADGEN=1, with
// LOADGEN_SECONDS (10), LOADGEN_PRODUCERS (8) and LOADGEN_WORKERS (8,
// comma-separated for several runs), and logs its tables.
func TestLoadgen(t *testing.T) {
	if os.Getenv("KFS_LOADGEN") != "1" {
		t.Skip("set KFS_LOADGEN=1 (make loadgen)")
	}
	requireEnv(t)
	secs := envInt(t, "LOADGEN_SECONDS", 10)
	producers := envInt(t, "LOADGEN_PRODUCERS", 8)
	workers := []int{8}
	if s := os.Getenv("LOADGEN_WORKERS"); s != "" {
		workers = nil
		for _, f := range strings.Split(s, ",") {
			n, err := strconv.Atoi(strings.TrimSpace(f))
			if err != nil || n < 1 {
				t.Fatalf("LOADGEN_WORKERS=%q", s)
			}
			workers = append(workers, n)
		}
	}
	for _, w := range workers {
		res, err := loadgen.Run(context.Background(), &loadgen.Config{
			DatabaseURL: env.url, Duration: time.Duration(secs) * time.Second, Producers: producers, Workers: w,
		})
		if err != nil {
			t.Fatal(err)
		}
		var sb strings.Builder
		res.WriteTable(&sb)
		t.Logf("loadgen producers=%d workers=%d:\n%s", producers, w, sb.String())
	}
}

func envInt(t *testing.T, name string, def int) int {
	t.Helper()
	s := os.Getenv(name)
	if s == "" {
		return def
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 1 {
		t.Fatalf("%s=%q: want an integer > 0", name, s)
	}
	return n
}
