package faultload_test

import (
	"context"
	"net"
	"net/url"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/knowledgefs/kfsdb/kfstype"
	"github.com/knowledgefs/kfsdb/tests/faultload"
	"github.com/knowledgefs/kfsdb/tests/pgtest"
)

// TestEveryPathClean runs a small load on each path with no fault: every
// attempt succeeds once, the in-transaction Starts commit with the app's
// write, and the report says so.
func TestEveryPathClean(t *testing.T) {
	for _, path := range faultload.Paths() {
		t.Run(string(path), func(t *testing.T) {
			ctx := context.Background()
			db := pgtest.NewDB(t)
			run := faultload.Start(ctx, t, &faultload.Config{
				Path: path, URL: db.URL, Upfront: 20, Documents: 40, InTxFraction: 0.5, Probe: true,
			})
			require.NoError(t, run.WaitCompleted(ctx, 10))
			run.MarkFault("none")
			rep := run.Finish(ctx)
			t.Log(rep.Summary("none"))
			t.Log(rep)
			rep.Require(t)
			require.Equal(t, 60, rep.Attempts)
			require.Equal(t, 20, rep.InTx)
			require.Equal(t, map[kfstype.RunState]int{kfstype.RunStateSucceeded: 60}, rep.Terminal)
			require.Len(t, rep.Faults, 1)
			require.GreaterOrEqual(t, rep.RTOComplete, time.Duration(0), "a completion after the mark")
			require.Positive(t, rep.ProbeCalls)
			require.Positive(t, rep.FencedWrites.Outcomes)
		})
	}
}

// TestMultiHostURL runs direct delivery through a multi-host URL whose
// first host refuses connections, as a failed primary's address does:
// pgx tries the next host (target_session_attrs=read-write), for the
// pool's connections and the source's LISTEN alike.
func TestMultiHostURL(t *testing.T) {
	ctx := context.Background()
	db := pgtest.NewDB(t)
	u, err := url.Parse(db.URL)
	require.NoError(t, err)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	dead := l.Addr().String()
	require.NoError(t, l.Close()) // nothing listens there now
	u.Host = dead + "," + u.Host
	q := u.Query()
	q.Set("target_session_attrs", "read-write")
	u.RawQuery = q.Encode()

	run := faultload.Start(ctx, t, &faultload.Config{Path: faultload.DirectListen, URL: u.String(), Upfront: 10, Documents: 20, InTxFraction: 0.5})
	rep := run.Finish(ctx)
	t.Log(rep)
	rep.Require(t)
	require.Equal(t, 30, rep.Attempts)
}
