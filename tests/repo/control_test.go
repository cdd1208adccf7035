package repo_test

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/knowledgefs/kfsdb/kfstype"
	"github.com/knowledgefs/kfsdb/repo"
)

// Helpers of the control-plane tests carry a ctl prefix so they cannot
// collide with other files of the package.

// ctlCount counts the rows of a table.
func ctlCount(t *testing.T, b *testBundle, table string) int {
	t.Helper()
	var n int
	require.NoError(t, b.db.Pool.QueryRow(b.ctx, "SELECT count(*) FROM "+table).Scan(&n))
	return n
}

func ctlRequireTransitionError(t *testing.T, err error, from kfstype.RunState) *repo.TransitionError {
	t.Helper()
	var te *repo.TransitionError
	require.ErrorAs(t, err, &te)
	require.ErrorIs(t, err, repo.ErrInvalidTransition)
	require.Equal(t, from, te.From)
	return te
}

var ctlLiveStates = []kfstype.RunState{
	kfstype.RunStateDispatchPending, kfstype.RunStateQueued, kfstype.RunStateRunning, kfstype.RunStateRetryWait,
}

var ctlTerminalStates = []kfstype.RunState{
	kfstype.RunStateSucceeded, kfstype.RunStateFailed, kfstype.RunStateCanceled, kfstype.RunStateSuperseded,
}

// ctlStateName turns dispatch_pending into DispatchPending for test names.
func ctlStateName(s kfstype.RunState) string {
	var out strings.Builder
	for _, part := range strings.Split(string(s), "_") {
		out.WriteString(strings.ToUpper(part[:1]) + part[1:])
	}
	return out.String()
}
