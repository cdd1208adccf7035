package httpguard

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestThrottleBoundedMemory: past MaxClients, the client whose last
// failure is oldest is dropped; memory stays bounded and nobody is
// refused for it.
func TestThrottleBoundedMemory(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	th := NewThrottle(&ThrottleOptions{Now: func() time.Time { return now }, MaxClients: 3})
	for i := range 10 {
		for range ThrottleFree + 2 {
			th.Fail(fmt.Sprintf("192.0.2.%d", i))
		}
		now = now.Add(time.Second)
	}
	require.Len(t, th.clients, 3)
	require.Contains(t, th.clients, "192.0.2.9")
	require.NotContains(t, th.clients, "192.0.2.0")
	require.True(t, th.Fail("192.0.2.9").Throttled, "the newest client is still counted")
}
