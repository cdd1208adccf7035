package runcfg

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/knowledgefs/kfsdb/internal/nilvalue"
	"github.com/knowledgefs/kfsdb/repo"
)

// Invalid is bad input to package pkg (worker, relay, pgsource): a
// *repo.InputError naming field (an argument, a receiver or a Config
// field) and the rule it breaks, after "pkg: ", so that callers match it
// as they match repo's (errors.As, errors.Is repo.ErrInvalidInput).
func Invalid(pkg, field, reason string) error {
	return fmt.Errorf("%s: %w", pkg, &repo.InputError{Field: field, Reason: reason})
}

// NotMade is Invalid for a receiver of type typ that pkg's New did not
// make (a nil pointer or a zero value).
func NotMade(pkg, typ string) error {
	return Invalid(pkg, typ, fmt.Sprintf("must be made by %s.New (is nil or a zero %s)", pkg, typ))
}

// Usable is the check at the top of a runtime value's methods (a Relay's,
// a Worker's): NotMade unless made, else Invalid for a nil ctx, else nil.
func Usable(ctx context.Context, pkg, typ string, made bool) error {
	switch {
	case !made:
		return NotMade(pkg, typ)
	case nilvalue.Is(ctx):
		return Invalid(pkg, "ctx", "must not be nil")
	}
	return nil
}

// Duration is a named duration for NonNegative.
type Duration struct {
	Field string
	Value time.Duration
}

// NonNegative returns Invalid for the first of ds that is negative, nil
// when none is.
func NonNegative(pkg string, ds ...Duration) error {
	for _, d := range ds {
		if d.Value < 0 {
			return Invalid(pkg, d.Field, fmt.Sprintf("must not be negative, got %s", d.Value))
		}
	}
	return nil
}

// ValidID returns Invalid for field when id is not a usable worker or
// relay id (repo.ValidateWorkerID), nil when it is.
func ValidID(pkg, field, id string) error {
	var ie *repo.InputError
	if err := repo.ValidateWorkerID(id); errors.As(err, &ie) {
		return Invalid(pkg, field, ie.Reason)
	}
	return nil
}
