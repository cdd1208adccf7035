// Package runtime_test runs the relay, the worker and the in-process queue
// together against a real PostgreSQL.
package runtime_test

import (
	"testing"

	"github.com/knowledgefs/kfsdb/tests/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }
