package runtime_test

import (
	"context"
	"strings"
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/knowledgefs/kfsdb/kfstype"
	"github.com/knowledgefs/kfsdb/relay"
	"github.com/knowledgefs/kfsdb/repo"
	"github.com/knowledgefs/kfsdb/tests/testfactory"
)

// publisherFunc adapts a function to relay.Publisher.
type publisherFunc func(ctx context.Context, msg *relay.Message) (*relay.Publication, error)

func (f publisherFunc) Publish(ctx context.Context, msg *relay.Message) (*relay.Publication, error) {
	return f(ctx, msg)
}

// TestRelayUnusableJobIDFailsOnlyItsPublication: a Publisher that returns
// a job id MarkDispatched cannot store (invalid UTF-8, NUL, too long, an
// empty external id) fails that one publication (backed off with the
// reason), and the rest of the batch is recorded as dispatched, instead
// of the whole batch staying unrecorded (and republished after its
// claims expire).
func TestRelayUnusableJobIDFailsOnlyItsPublication(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 4)
	ctx := e.ctx
	_, attempts := e.start(t, 1, 5, 0)
	empty := ""
	bad := map[uuid.UUID]*relay.Publication{
		attempts[0].ID: {QueueJobID: "job-\xff"},
		attempts[1].ID: {QueueJobID: "job-\x00"},
		attempts[2].ID: {QueueJobID: strings.Repeat("j", repo.MaxJobIDLength+1)},
		attempts[3].ID: {QueueJobID: "job-ok", ExternalJobID: &empty},
	}
	pub := publisherFunc(func(_ context.Context, msg *relay.Message) (*relay.Publication, error) {
		if p, ok := bad[msg.AttemptID]; ok {
			return p, nil
		}
		return &relay.Publication{QueueJobID: "job-" + msg.AttemptID.String()}, nil
	})
	rl := newRelay(t, e.pool, pub, relay.Config{PollOnly: true})
	n, err := rl.RunOnce(ctx)
	require.NoError(t, err)
	require.Equal(t, len(attempts), n)
	for _, a := range attempts {
		rows := testfactory.RequireInvariants(ctx, t, e.pool, a.ID)
		if _, isBad := bad[a.ID]; isBad {
			require.Equal(t, kfstype.OutboxStatusPending, rows.Outbox.Status, "backed off")
			require.Contains(t, *rows.Outbox.LastError, "unusable")
			continue
		}
		require.Equal(t, kfstype.OutboxStatusDispatched, rows.Outbox.Status)
		require.Equal(t, kfstype.RunStateQueued, rows.Attempt.RunState)
	}
}
