package repo

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"syscall"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

func TestIsRetryable(t *testing.T) {
	t.Parallel()
	wrap := func(err error) error { return fmt.Errorf("heartbeat attempt 0190: %w", err) }
	dialErr := &net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}
	cases := []struct {
		name string
		err  error
		want bool
	}{
		{"Nil", nil, false},
		{"Canceled", wrap(context.Canceled), false},
		{"DeadlineExceeded", wrap(context.DeadlineExceeded), true},
		{"RetryTransaction", mapError(&pgconn.PgError{Code: "40P01"}), true},
		{"SerializationFailure", wrap(mapError(&pgconn.PgError{Code: "40001"})), true},
		{"AdminShutdown", wrap(&pgconn.PgError{Severity: "FATAL", Code: "57P01", Message: "terminating connection due to administrator command"}), true},
		{"CrashShutdown", &pgconn.PgError{Code: "57P02"}, true},
		{"CannotConnectNow", &pgconn.PgError{Code: "57P03"}, true},
		{"TooManyConnections", &pgconn.PgError{Code: "53300"}, true},
		{"ConnectionFailure", &pgconn.PgError{Code: "08006"}, true},
		{"ConnClosed", wrap(pgconn.ErrConnClosed), true},
		{"UnexpectedEOF", wrap(io.ErrUnexpectedEOF), true},
		{"EOF", wrap(io.EOF), true},
		{"NetError", wrap(dialErr), true},
		{"UniqueViolation", mapError(&pgconn.PgError{Code: "23505", ConstraintName: "x"}), false},
		{"SyntaxError", &pgconn.PgError{Code: "42601"}, false},
		{"NoRows", mapError(pgx.ErrNoRows), false},
		{"NotFound", wrap(ErrNotFound), false},
		{"LeaseLost", wrap(ErrLeaseLost), false},
		{"InvalidTransition", &TransitionError{Transition: "complete"}, false},
		{"InvalidInput", &InputError{Field: "TenantID", Reason: "is empty"}, false},
		{"LiveAttemptExists", ErrLiveAttemptExists, false},
		{"Plain", errors.New("boom"), false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			if got := IsRetryable(c.err); got != c.want {
				t.Fatalf("IsRetryable(%v) = %v, want %v", c.err, got, c.want)
			}
		})
	}
}
