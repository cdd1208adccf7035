package testfactory

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// RequireValidateErr asserts an options Validate result: no error when
// wantErr is empty, else an error containing it. The commands' tests (the
// deploy binary's and kfsdb-bench's) table their option checks with it.
func RequireValidateErr(t *testing.T, err error, wantErr string) {
	t.Helper()
	if wantErr == "" {
		require.NoError(t, err)
		return
	}
	require.ErrorContains(t, err, wantErr)
}
