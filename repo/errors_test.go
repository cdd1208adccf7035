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
		{"ReadOnlyTransaction", wrap(&pgconn.PgError{Code: "25006"}), true},
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

// TestMapErrorKeepsThePgError: each mapped driver error still unwraps to
// the *pgconn.PgError, so callers can read its SQLSTATE and detail with
// errors.As, and matches its sentinel with errors.Is.
func TestMapErrorKeepsThePgError(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name     string
		pgErr    *pgconn.PgError
		sentinel error
	}{
		{"ActiveSlotConflict", &pgconn.PgError{Code: "23505", ConstraintName: activeSlotIndex, Message: "duplicate key"}, ErrLiveAttemptExists},
		{"OtherConstraint", &pgconn.PgError{Code: "23503", ConstraintName: "fk", Message: "foreign key"}, ErrConstraint},
		{"SerializationFailure", &pgconn.PgError{Code: "40001", Message: "could not serialize"}, ErrRetryTransaction},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			err := mapError(fmt.Errorf("retry failed attempt: %w", c.pgErr))
			if !errors.Is(err, c.sentinel) {
				t.Fatalf("errors.Is(%v, %v) = false", err, c.sentinel)
			}
			var got *pgconn.PgError
			if !errors.As(err, &got) || got != c.pgErr {
				t.Fatalf("errors.As(%v, *pgconn.PgError) does not find the driver error", err)
			}
		})
	}
}
