package httpguard_test

import (
	"bufio"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/knowledgefs/kfsdb/cmd/kfsdb/httpguard"
)

// clock is a settable clock for throttles.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func newClock() *clock { return &clock{t: time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)} }

func (c *clock) now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }

func (c *clock) advance(d time.Duration) { c.mu.Lock(); defer c.mu.Unlock(); c.t = c.t.Add(d) }

// TestThrottleGrowsPerClient: a client's first ThrottleFree wrong tokens
// are free, then each locks it twice as long as the last, up to
// ThrottleMax; quiet time forgives; other clients are never locked by
// its failures.
func TestThrottleGrowsPerClient(t *testing.T) {
	t.Parallel()
	c := newClock()
	th := httpguard.NewThrottle(&httpguard.ThrottleOptions{Now: c.now})
	for i := range httpguard.ThrottleFree {
		r := th.Fail("192.0.2.1")
		require.False(t, r.Throttled, i)
		require.Zero(t, r.RetryAfter, i)
		require.Equal(t, http.StatusUnauthorized, r.Status())
	}
	r := th.Fail("192.0.2.1")
	require.False(t, r.Throttled, "the failure that starts the lockout is answered 401")
	require.Equal(t, time.Second, r.RetryAfter)
	for want := 2 * time.Second; want < httpguard.ThrottleMax; want *= 2 {
		r := th.Fail("192.0.2.1")
		require.True(t, r.Throttled)
		require.Equal(t, http.StatusTooManyRequests, r.Status())
		require.Equal(t, want, r.RetryAfter)
	}
	for range 100 {
		require.Equal(t, httpguard.ThrottleMax, th.Fail("192.0.2.1").RetryAfter, "capped")
	}
	require.False(t, th.Fail("192.0.2.2").Throttled, "another client is not locked by the first one's failures")

	// An hour without failures forgives the client wholly.
	c.advance(time.Hour)
	for range httpguard.ThrottleFree {
		r := th.Fail("192.0.2.1")
		require.False(t, r.Throttled)
		require.Zero(t, r.RetryAfter)
	}
	// Every address of an IPv6 /64 is one client.
	for i := range httpguard.ThrottleFree + 1 {
		require.False(t, th.Fail(fmt.Sprintf("2001:db8::%x", i+1)).Throttled)
	}
	require.True(t, th.Fail("2001:db8::ffff").Throttled)
	require.False(t, th.Fail("2001:db8:0:1::1").Throttled, "another /64")
}

// TestThrottleLogsBoundedRefusals: 1000 wrong tokens in one second log
// RefusalLogBurst lines, and the next window's first line says how many
// were not logged.
func TestThrottleLogsBoundedRefusals(t *testing.T) {
	t.Parallel()
	c := newClock()
	th := httpguard.NewThrottle(&httpguard.ThrottleOptions{Now: c.now})
	logged := 0
	for i := range 1000 {
		r := th.Fail(fmt.Sprintf("198.51.100.%d", i%200))
		require.Zero(t, r.Suppressed)
		if r.Log {
			logged++
		}
	}
	require.Equal(t, httpguard.RefusalLogBurst, logged)
	c.advance(httpguard.RefusalLogWindow)
	r := th.Fail("198.51.100.1")
	require.True(t, r.Log)
	require.Equal(t, 1000-httpguard.RefusalLogBurst, r.Suppressed)
	var out strings.Builder
	r.LogSuppressed(slog.New(slog.NewTextHandler(&out, nil)), "metrics")
	require.Contains(t, out.String(), fmt.Sprintf(`msg="refusals not logged" server=metrics count=%d`, 1000-httpguard.RefusalLogBurst))
}

// TestMetricsThrottle is issue 39's N3 at /metrics: 60 wrong tokens from
// one address end in 429 and are logged at most RefusalLogBurst times;
// the right token is still served there; an Authorization: Basic header
// (an auth proxy's) is answered 401 and counts for nothing.
func TestMetricsThrottle(t *testing.T) {
	t.Parallel()
	ok := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("kfsdb_attempts 1\n")) })
	var logs strings.Builder
	var mu sync.Mutex
	log := slog.New(slog.NewTextHandler(writerFunc(func(p []byte) (int, error) { mu.Lock(); defer mu.Unlock(); return logs.Write(p) }), nil))
	c := newClock()
	srv := httptest.NewServer(httpguard.Metrics(ok, httpguard.MetricsGuard{Token: strong, Log: log,
		Throttle: httpguard.NewThrottle(&httpguard.ThrottleOptions{Now: c.now})}))
	t.Cleanup(srv.Close)
	u := srv.URL + "/metrics"

	for range 100 {
		require.Equal(t, http.StatusUnauthorized, status(t, u, map[string]string{"Authorization": "Basic dXNlcjpwYXNz"}))
	}
	codes := map[int]int{}
	last := 0
	for range 60 {
		last = status(t, u, map[string]string{"Authorization": "Bearer wrong-" + strong})
		codes[last]++
	}
	require.Equal(t, http.StatusTooManyRequests, last)
	require.Equal(t, map[int]int{http.StatusUnauthorized: httpguard.ThrottleFree + 1, http.StatusTooManyRequests: 60 - httpguard.ThrottleFree - 1}, codes,
		"the Basic headers were not counted")
	require.Equal(t, http.StatusOK, status(t, u, map[string]string{"Authorization": "Bearer " + strong}), "the right token from the same address")
	mu.Lock()
	defer mu.Unlock()
	require.Equal(t, httpguard.RefusalLogBurst, strings.Count(logs.String(), "metrics: wrong bearer token"))
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }

// TestGeneratedTokensPass: tokens made as the docs say (`openssl rand
// -base64 32`, `openssl rand -hex 16`) pass CheckToken, every one of a
// thousand of each (a fixed seed: the same thousand every run).
func TestGeneratedTokensPass(t *testing.T) {
	t.Parallel()
	rnd := rand.New(rand.NewChaCha8([32]byte{39}))
	lowest := 1e9
	for range 1000 {
		b := make([]byte, 32)
		for i := range b {
			b[i] = byte(rnd.Uint32())
		}
		for _, token := range []string{base64.StdEncoding.EncodeToString(b), hex.EncodeToString(b[:16])} {
			require.NoError(t, httpguard.CheckToken(token), token)
			lowest = min(lowest, httpguard.EstimateBits(token))
		}
	}
	t.Logf("lowest estimate: %.0f bits", lowest)
}

// TestServerClosesIdleConnections: a server made by NewServer closes a
// kept-alive connection that stays idle past Timeouts.Idle.
func TestServerClosesIdleConnections(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	srv := httpguard.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}),
		httpguard.Timeouts{ReadHeader: time.Second, Read: time.Second, Write: time.Second, Idle: 50 * time.Millisecond})
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	conn, err := net.Dial("tcp", ln.Addr().String())
	require.NoError(t, err)
	defer conn.Close()
	_, err = fmt.Fprintf(conn, "GET / HTTP/1.1\r\nHost: x\r\n\r\n")
	require.NoError(t, err)
	rd := bufio.NewReader(conn)
	res, err := http.ReadResponse(rd, nil)
	require.NoError(t, err)
	res.Body.Close()
	// Far above Idle: a server that closes idle connections has done so.
	require.NoError(t, conn.SetReadDeadline(time.Now().Add(30*time.Second)))
	_, err = rd.ReadByte()
	require.ErrorIs(t, err, io.EOF)
}
