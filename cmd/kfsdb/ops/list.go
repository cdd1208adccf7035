package ops

// Selecting a tenant's attempts: the filter of a list page or a bulk
// action, the page cursors of a command line or a URL, the run states a
// flag or a form names.

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/knowledgefs/kfsdb/kfstype"
	"github.com/knowledgefs/kfsdb/repo"
)

// Filter selects a tenant's attempts, for a list page or a bulk action.
type Filter struct {
	// TenantID is the tenant. Required.
	TenantID string
	// States are the run states matched; empty matches every state.
	States []kfstype.RunState
	// KnowledgeSpaceID narrows the match to one space; nil: every space.
	KnowledgeSpaceID *uuid.UUID
	// OlderThan and NewerThan bound an attempt's age: the time since it
	// ended or, while it is live, since it was created
	// (repo.ListAttemptsParams); 0: no bound.
	OlderThan, NewerThan time.Duration
	// ErrorCode matches the attempts whose last error code is it; "":
	// any.
	ErrorCode string
}

// states is f's states in kfstype.RunStates() order, every state when
// none is named.
func (f Filter) states() []kfstype.RunState {
	var out []kfstype.RunState
	for _, s := range kfstype.RunStates() {
		if len(f.States) == 0 || slices.Contains(f.States, s) {
			out = append(out, s)
		}
	}
	return out
}

// Params is the repo.ListAttempts page of f that starts after after
// (nil: the first) and holds at most limit attempts.
func (f Filter) Params(after *repo.AttemptCursor, limit int32) *repo.ListAttemptsParams {
	return &repo.ListAttemptsParams{TenantID: f.TenantID, States: f.states(), KnowledgeSpaceID: f.KnowledgeSpaceID,
		After: after, Limit: limit, OlderThan: f.OlderThan, NewerThan: f.NewerThan, LastErrorCode: f.ErrorCode}
}

// String is f as one canonical line, the same for every way of writing
// the same filter (states in their usual order, durations normalized):
// what audit lines record and what the console's confirmation binds.
func (f Filter) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "tenant=%s", strconv.Quote(f.TenantID))
	if len(f.States) == 0 {
		b.WriteString(" state=any")
	} else {
		names := make([]string, 0, len(f.States))
		for _, s := range f.states() {
			names = append(names, string(s))
		}
		fmt.Fprintf(&b, " state=%s", strings.Join(names, ","))
	}
	if f.KnowledgeSpaceID != nil {
		fmt.Fprintf(&b, " space=%s", f.KnowledgeSpaceID)
	}
	if f.OlderThan > 0 {
		fmt.Fprintf(&b, " older_than=%s", f.OlderThan)
	}
	if f.NewerThan > 0 {
		fmt.Fprintf(&b, " newer_than=%s", f.NewerThan)
	}
	if f.ErrorCode != "" {
		fmt.Fprintf(&b, " error_code=%s", strconv.Quote(f.ErrorCode))
	}
	return b.String()
}

// ErrBadCursor is returned by DecodeCursor.
var ErrBadCursor = errors.New("bad cursor")

// EncodeCursor writes a page cursor as an opaque token for a command line
// or a URL: "l.<id>" for a live attempt, "t.<completed_at ns>.<id>" for a
// terminal one. nil encodes as "".
func EncodeCursor(c *repo.AttemptCursor) string {
	if c == nil {
		return ""
	}
	if c.CompletedAt == nil {
		return "l." + c.ID.String()
	}
	return fmt.Sprintf("t.%d.%s", c.CompletedAt.UnixNano(), c.ID)
}

// DecodeCursor reads EncodeCursor's token ("" is nil: the first page).
func DecodeCursor(s string) (*repo.AttemptCursor, error) {
	if s == "" {
		return nil, nil
	}
	parts := strings.Split(s, ".")
	switch {
	case len(parts) == 2 && parts[0] == "l":
		id, err := uuid.Parse(parts[1])
		if err != nil {
			return nil, fmt.Errorf("%w %q", ErrBadCursor, s)
		}
		return &repo.AttemptCursor{ID: id}, nil
	case len(parts) == 3 && parts[0] == "t":
		ns, err1 := strconv.ParseInt(parts[1], 10, 64)
		id, err2 := uuid.Parse(parts[2])
		if err1 != nil || err2 != nil {
			return nil, fmt.Errorf("%w %q", ErrBadCursor, s)
		}
		t := time.Unix(0, ns).UTC()
		return &repo.AttemptCursor{CompletedAt: &t, ID: id}, nil
	}
	return nil, fmt.Errorf("%w %q", ErrBadCursor, s)
}

// ParseStates reads a comma-separated list of run states ("" is every
// state).
func ParseStates(s string) ([]kfstype.RunState, error) {
	if s == "" {
		return kfstype.RunStates(), nil
	}
	var out []kfstype.RunState
	seen := map[kfstype.RunState]bool{}
	for _, name := range strings.Split(s, ",") {
		st := kfstype.RunState(strings.TrimSpace(name))
		if !slices.Contains(kfstype.RunStates(), st) {
			return nil, fmt.Errorf("unknown run state %q: want one of %v", st, kfstype.RunStates())
		}
		if !seen[st] {
			seen[st] = true
			out = append(out, st)
		}
	}
	return out, nil
}
