package main

import (
	"bufio"
	"context"
	"io"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"

	"github.com/knowledgefs/kfsdb/tests/natstest"
)

// TestServesUntilCanceled: the first line is a URL a JetStream client can
// use; canceling stops the server, removes the store and exits 0.
func TestServesUntilCanceled(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	r, w := io.Pipe()
	done := make(chan int, 1)
	go func() {
		done <- run(ctx, nil, w, io.Discard)
		_ = w.Close()
	}()
	lines := bufio.NewScanner(r)
	require.True(t, lines.Scan())
	url := lines.Text()
	require.True(t, strings.HasPrefix(url, "nats://127.0.0.1:"), url)
	require.True(t, lines.Scan())
	store := strings.TrimSuffix(strings.SplitN(lines.Text(), "store ", 2)[1], "; SIGTERM or Ctrl-C stops it")
	require.DirExists(t, store)

	nc, err := nats.Connect(url)
	require.NoError(t, err)
	wctx, wcancel := context.WithTimeout(ctx, 10*time.Second)
	defer wcancel()
	require.NoError(t, natstest.WaitJetStream(wctx, nc))
	nc.Close()

	cancel()
	go func() { _, _ = io.Copy(io.Discard, r) }()
	select {
	case code := <-done:
		require.Zero(t, code)
	case <-time.After(10 * time.Second):
		t.Fatal("did not stop")
	}
	_, err = os.Stat(store)
	require.True(t, os.IsNotExist(err), "store %s left behind", store)
}

func TestBadFlagsExitTwo(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{{"--port", "x"}, {"extra"}, {"--nope"}} {
		require.Equal(t, 2, run(context.Background(), args, io.Discard, io.Discard), "%q", args)
	}
	require.Equal(t, 1, run(context.Background(), []string{"--port", "70000"}, io.Discard, io.Discard))
}
