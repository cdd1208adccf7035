package faultload_test

import (
	"testing"

	"github.com/knowledgefs/kfsdb/tests/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }
