package repo

import "testing"

func TestPlanClassOf(t *testing.T) {
	for _, tc := range []struct {
		bytes int64
		class int
	}{
		{-1, 0}, {0, 0}, {8192, 0}, {3 * 8192, 0},
		{4 * 8192, 1}, {15 * 8192, 1},
		{16 * 8192, 2}, {63 * 8192, 2},
		{64 * 8192, 3},
		{1 << 40, 13},
		{1<<63 - 1, maxPlanClass},
	} {
		if got := planClassOf(tc.bytes); got != tc.class {
			t.Errorf("planClassOf(%d) = %d, want %d", tc.bytes, got, tc.class)
		}
	}
	if planClassSuffix[0] != "" || planClassSuffix[3] != "\n-- plan class 3" {
		t.Errorf("suffixes: %q, %q", planClassSuffix[0], planClassSuffix[3])
	}
}
