package memqueue_test

import (
	"context"
	"testing"

	"github.com/google/uuid"

	"github.com/knowledgefs/kfsdb/memqueue"
	"github.com/knowledgefs/kfsdb/relay"
)

// Job IDs are unique across queues: tests/multiproc runs a queue in each of
// three processes on one database, and tells a republished attempt from its
// earlier delivery by the job ID; "mem-1" from two queues made a republish
// look like a write under the old, expired delivery.
func TestJobIDsAreUniqueAcrossQueues(t *testing.T) {
	ctx := context.Background()
	seen := map[string]bool{}
	for range 3 {
		q := memqueue.New()
		for range 3 {
			pub, err := q.Publish(ctx, &relay.Message{AttemptID: uuid.New()})
			if err != nil {
				t.Fatal(err)
			}
			if seen[pub.QueueJobID] {
				t.Fatalf("job ID %q published twice", pub.QueueJobID)
			}
			seen[pub.QueueJobID] = true
		}
	}
}
