package backoff

import (
	"testing"
	"time"
)

func TestExponential(t *testing.T) {
	cases := []struct {
		n    int32
		want time.Duration
	}{
		{0, time.Second}, {1, time.Second}, {2, 2 * time.Second}, {3, 4 * time.Second},
		{6, 32 * time.Second}, {7, 60 * time.Second}, {1000, 60 * time.Second},
	}
	for _, c := range cases {
		if got := Exponential(time.Second, time.Minute, c.n); got != c.want {
			t.Errorf("Exponential(1s, 1m, %d) = %s, want %s", c.n, got, c.want)
		}
	}
}

func TestJitterStaysInRange(t *testing.T) {
	for range 1000 {
		d := Jitter(time.Second, 0.2)
		if d < time.Second || d > 1200*time.Millisecond {
			t.Fatalf("Jitter(1s, 0.2) = %s, outside [1s, 1.2s]", d)
		}
	}
}

func TestRetryGrowsToItsCeilingNeverPastPoll(t *testing.T) {
	if d := Retry(1, time.Hour); d < 100*time.Millisecond || d > 120*time.Millisecond {
		t.Fatalf("Retry(1) = %s, want 100 ms + up to 20%%", d)
	}
	if d := Retry(30, time.Hour); d < RetryCeiling || d > RetryCeiling*6/5 {
		t.Fatalf("Retry(30) = %s, want RetryCeiling + up to 20%%", d)
	}
	if d := Retry(30, time.Second); d != time.Second {
		t.Fatalf("Retry(30) under a 1 s poll = %s, want the poll", d)
	}
}
