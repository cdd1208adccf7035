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

// RetryCeiling caps the wait before the runtime tries the database again
// after a failure (a fetch, a claim, a LISTEN).
const RetryCeiling = 5 * time.Second

// Retry is the wait before trying the database again after the n-th
// failure in a row: 100 ms doubling to RetryCeiling, jittered, and never
// over poll (the owner's PollInterval). Waiting a whole PollInterval
// instead (an hour, for an idle fleet) would leave a server back from a
// failover, or a dead connection replaced, unused that long.
func Retry(n int32, poll time.Duration) time.Duration {
	return min(poll, Jitter(Exponential(100*time.Millisecond, RetryCeiling, n), 0.2))
}
