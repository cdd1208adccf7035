package pgsource

import "testing"

func TestKeptFetchConns(t *testing.T) {
	for _, c := range []struct {
		maxConns int32
		want     int
	}{{1, 0}, {4, 0}, {7, 0}, {8, 1}, {15, 1}, {16, 2}, {20, 2}, {200, 2}} {
		if got := keptFetchConns(c.maxConns); got != c.want {
			t.Errorf("keptFetchConns(%d) = %d, want %d", c.maxConns, got, c.want)
		}
	}
}
