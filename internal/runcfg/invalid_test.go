package runcfg

import (
	"context"
	"errors"
	"testing"

	"github.com/knowledgefs/kfsdb/repo"
)

func TestUsable(t *testing.T) {
	var nilCtx context.Context
	for _, c := range []struct {
		name      string
		ctx       context.Context
		made      bool
		wantField string
		wantText  string
	}{
		{"made, with a context", context.Background(), true, "", ""},
		{"not made", context.Background(), false, "Relay", "relay: kfsdb: invalid input: Relay must be made by relay.New (is nil or a zero Relay)"},
		{"not made and no context: the receiver first", nilCtx, false, "Relay", ""},
		{"no context", nilCtx, true, "ctx", "relay: kfsdb: invalid input: ctx must not be nil"},
	} {
		t.Run(c.name, func(t *testing.T) {
			err := Usable(c.ctx, "relay", "Relay", c.made)
			if c.wantField == "" {
				if err != nil {
					t.Fatalf("Usable = %v, want nil", err)
				}
				return
			}
			var ie *repo.InputError
			if !errors.As(err, &ie) || ie.Field != c.wantField || !errors.Is(err, repo.ErrInvalidInput) {
				t.Fatalf("Usable = %v, want a *repo.InputError for %s", err, c.wantField)
			}
			if c.wantText != "" && err.Error() != c.wantText {
				t.Errorf("Usable = %q, want %q", err, c.wantText)
			}
		})
	}
}
