package pgsource

import (
	"testing"
	"time"
)

// The jitter shortens a poll by the drawn part of frac, never lengthens
// it, and leaves it whole at frac 0.
func TestJittered(t *testing.T) {
	for _, c := range []struct {
		frac, draw float64
		want       time.Duration
	}{
		{0, 0.9, time.Second},
		{0.2, 0, time.Second},
		{0.2, 0.5, 900 * time.Millisecond},
		{1, 0.75, 250 * time.Millisecond},
	} {
		if got := jittered(time.Second, c.frac, func() float64 { return c.draw }); got != c.want {
			t.Errorf("jittered(1s, %v, %v) = %s, want %s", c.frac, c.draw, got, c.want)
		}
	}
}
