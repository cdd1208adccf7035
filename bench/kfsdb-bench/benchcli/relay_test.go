package benchcli

import (
	"bytes"
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/knowledgefs/kfsdb/cmd/kfsdb/cli"
	"github.com/knowledgefs/kfsdb/repo"
	"github.com/knowledgefs/kfsdb/tests/pgtest"
	"github.com/knowledgefs/kfsdb/tests/testfactory"
)

func TestRelayOptsValidate(t *testing.T) {
	t.Parallel()
	var out bytes.Buffer
	for name, tc := range map[string]struct {
		opts    RelayOpts
		wantErr string
	}{
		"MissingURL": {RelayOpts{Out: &out}, "DatabaseURL is required"},
		"BadURL":     {RelayOpts{DatabaseURL: "postgres://u@h:notaport/db", Out: &out}, "DatabaseURL is not a valid"},
		"MissingOut": {RelayOpts{DatabaseURL: "postgres://u@h/db"}, "Out is required"},
		"Valid":      {RelayOpts{DatabaseURL: "postgres://u@h/db", Out: &out, PollOnly: true}, ""},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			requireValidateErr(t, tc.opts.Validate(), tc.wantErr)
		})
	}
}

// TestRelayCommandPublishesUntilInterrupted runs `kfsdb-bench relay`
// (printing, $DATABASE_URL's database) until it is interrupted: the
// attempt is published and marked queued with the printer's job id.
func TestRelayCommandPublishesUntilInterrupted(t *testing.T) {
	t.Parallel()
	for name, args := range map[string][]string{"ListenAndPoll": nil, "PollOnly": {"--poll-only"}} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			db := pgtest.NewDB(t)
			s := testfactory.NewScope(t.Context(), t, db.Pool, nil)
			res, err := repo.New(nil).Start(t.Context(), db.Pool, s.StartParams())
			require.NoError(t, err)

			ctx, cancel := context.WithCancel(t.Context())
			defer cancel()
			var stdout, stderr testfactory.SyncBuffer
			done := make(chan int, 1)
			env := func(k string) string { return map[string]string{cli.EnvDatabaseURL: db.URL}[k] }
			go func() { done <- Main(ctx, append([]string{"relay"}, args...), &stdout, &stderr, env) }()
			want := "published document.compile attempt=" + res.Attempt.ID.String() + " key=document.compile:" + res.Attempt.ID.String()
			require.Eventually(t, func() bool { return bytes.Contains([]byte(stdout.String()), []byte(want)) }, 15*time.Second, 20*time.Millisecond)
			require.Eventually(t, func() bool {
				a, err := repo.New(nil).GetAttempt(t.Context(), db.Pool, &repo.GetAttemptParams{TenantID: s.TenantID, AttemptID: res.Attempt.ID})
				require.NoError(t, err)
				return a.RunState == "queued" && a.QueueJobID != nil && len(*a.QueueJobID) > 4 && (*a.QueueJobID)[:4] == "log-"
			}, 15*time.Second, 20*time.Millisecond)
			cancel()
			require.Equal(t, 0, <-done, "stderr: %s", stderr.String())
			require.Contains(t, stdout.String(), "stopped")
		})
	}
}
