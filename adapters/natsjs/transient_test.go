package natsjs

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// TestTransient: the errors a leader change or a lost acknowledgement
// produce are retried inside Publish; anything else goes back to the
// relay (and counts against the row's dispatch attempts).
func TestTransient(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		err  error
		want bool
	}{
		{nats.ErrNoResponders, true},
		{fmt.Errorf("publish: %w", context.DeadlineExceeded), true},
		{&jetstream.APIError{Code: 503, ErrorCode: 10008, Description: "JetStream system temporarily unavailable"}, true},
		// Seen in CI during the no-leader phase of TestStreamLeaderLossMidRun.
		{fmt.Errorf("nats: %w", &jetstream.APIError{Code: 409, ErrorCode: errCodeDuplicateInProcess, Description: "duplicate message id is in process"}), true},
		{&jetstream.APIError{Code: 409, ErrorCode: 10071, Description: "wrong last sequence"}, false},
		{&jetstream.APIError{Code: 400, ErrorCode: 10003, Description: "bad request"}, false},
		{errors.New("maximum payload exceeded"), false},
	} {
		if got := transient(tc.err); got != tc.want {
			t.Errorf("transient(%v) = %v, want %v", tc.err, got, tc.want)
		}
	}
}
