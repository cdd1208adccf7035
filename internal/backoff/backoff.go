// Package backoff computes the runtime's exponential backoff.
package backoff

import (
	"math/rand/v2"
	"time"
)

// Exponential returns min(ceiling, base·2^(n−1)) for the n-th attempt
// (n < 1 counts as 1), without overflow.
func Exponential(base, ceiling time.Duration, n int32) time.Duration {
	if n < 1 {
		n = 1
	}
	d := base
	for i := int32(1); i < n; i++ {
		if d >= ceiling/2 {
			return ceiling
		}
		d *= 2
	}
	return min(d, ceiling)
}

// Jitter adds up to frac·d of random delay, so that rows failing together
// do not retry in lockstep.
func Jitter(d time.Duration, frac float64) time.Duration {
	if d <= 0 || frac <= 0 {
		return d
	}
	return d + time.Duration(rand.Float64()*frac*float64(d))
}
