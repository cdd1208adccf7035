package keptconn

import "testing"

func TestPerEight(t *testing.T) {
	for _, c := range []struct {
		maxConns int32
		most     int
		want     int
	}{{1, 2, 0}, {4, 2, 0}, {7, 2, 0}, {8, 2, 1}, {15, 2, 1}, {16, 2, 2}, {20, 2, 2}, {200, 2, 2}, {8, 1, 1}, {200, 1, 1}, {7, 1, 0}} {
		if got := PerEight(c.maxConns, c.most); got != c.want {
			t.Errorf("PerEight(%d, %d) = %d, want %d", c.maxConns, c.most, got, c.want)
		}
	}
}
