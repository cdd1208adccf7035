// Package capability skips a test whose whole capability (a browser,
// PgBouncer, the user's seed file, a restartable container, the HA
// cluster's image) is missing on this machine, and names it so that
// `make test`'s summary can list it.
//
// Under CI=true a missing capability fails the test instead: CI installs
// everything the suite needs, so a skip there means a path went untested
// while the run reported green.
package capability

import (
	"fmt"
	"os"
	"testing"
)

// Names of the capabilities the suite skips without.
const (
	Browser   = "browser"
	PgBouncer = "pgbouncer"
	Seed      = "seed"
	Container = "container"
)

// EnvAllowed lists capabilities a CI run may do without, comma-separated
// (e.g. KFS_ALLOW_MISSING=container when CI points the suite at an
// existing server through KFS_TEST_DATABASE_URL).
const EnvAllowed = "KFS_ALLOW_MISSING"

// Missing skips t because capability name is unavailable, for the reason
// given; under CI=true (unless EnvAllowed lists name) it fails t instead.
// The message starts with "capability <name> missing:", which `make test`'s
// summary reads.
func Missing(t testing.TB, name, format string, args ...any) {
	t.Helper()
	msg := fmt.Sprintf("capability %s missing: %s", name, fmt.Sprintf(format, args...))
	if os.Getenv("CI") == "true" && !allowed(name) {
		t.Fatal(msg + " (CI=true: a whole capability may not be skipped)")
	}
	t.Skip(msg)
}

func allowed(name string) bool {
	for _, a := range splitComma(os.Getenv(EnvAllowed)) {
		if a == name {
			return true
		}
	}
	return false
}

func splitComma(s string) []string {
	var out []string
	start := 0
	for i := 0; i <= len(s); i++ {
		if i == len(s) || s[i] == ',' {
			if i > start {
				out = append(out, s[start:i])
			}
			start = i + 1
		}
	}
	return out
}
