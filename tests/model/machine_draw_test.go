package model_test

import (
	"fmt"
	"sync"

	"pgregory.net/rapid"
)

// uniform draws from [0, n) evenly. rapid's own integer generators lean
// hard towards small values (a quarter of IntRange(0, 99) draws are below
// 3), which would make every "rare" branch common; hashing the drawn
// value spreads it while keeping it shrinkable (towards mix(0)).
func uniform(t *rapid.T, label string, n int) int {
	g, ok := uniformGens.Load(n)
	if !ok {
		g, _ = uniformGens.LoadOrStore(n, rapid.Map(rapid.Uint64(), func(u uint64) int { return int(mix(u) % uint64(n)) }))
	}
	return g.(*rapid.Generator[int]).Draw(t, label)
}

// uniformGens caches uniform's generators by n.
var uniformGens sync.Map

// mix is SplitMix64's finalizer.
func mix(z uint64) uint64 {
	z += 0x9e3779b97f4a7c15
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
	z = (z ^ (z >> 27)) * 0x94d049bb133111eb
	return z ^ (z >> 31)
}

// pct is a uniform percentage, 0..99.
func pct(t *rapid.T, label string) int { return uniform(t, label, 100) }

// draw picks one of vs uniformly.
func draw[V any](t *rapid.T, label string, vs ...V) V { return vs[uniform(t, label, len(vs))] }

// drawAttempt picks one of the sequence's attempts, one satisfying prefer
// (when any does) 80% of the time.
func (s *seq) drawAttempt(t *rapid.T, prefer func(*attemptModel) bool) *attemptModel {
	var preferred []*attemptModel
	if prefer != nil {
		for _, am := range s.m.attempts {
			if prefer(am) {
				preferred = append(preferred, am)
			}
		}
	}
	pool := s.m.attempts
	if len(preferred) > 0 && pct(t, "prefer") < 80 {
		pool = preferred
	}
	return pool[uniform(t, "attempt", len(pool))]
}

func (s *seq) nextJob() string {
	s.jobs++
	return fmt.Sprintf("job-%d", s.jobs)
}
