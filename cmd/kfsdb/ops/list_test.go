package ops

import (
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/knowledgefs/kfsdb/kfstype"
)

// TestFilterStringIsCanonical: the line a confirmation binds and an
// audit line records is the same for every way of writing one filter,
// and differs for any change of it. Mutation: String writing the states
// in the order given fails the first case; leaving out the error code
// fails the last.
func TestFilterStringIsCanonical(t *testing.T) {
	space := uuid.MustParse("0190a0e5-0000-7000-8000-000000000001")
	base := Filter{TenantID: "acme", States: []kfstype.RunState{kfstype.RunStateFailed, kfstype.RunStateQueued},
		KnowledgeSpaceID: &space, OlderThan: 90 * time.Minute, ErrorCode: "E_PARSE"}
	same := base
	same.States = []kfstype.RunState{kfstype.RunStateQueued, kfstype.RunStateFailed}
	if base.String() != same.String() {
		t.Fatalf("state order changes the line: %q vs %q", base.String(), same.String())
	}
	const want = `tenant="acme" state=queued,failed space=0190a0e5-0000-7000-8000-000000000001 older_than=1h30m0s error_code="E_PARSE"`
	if base.String() != want {
		t.Fatalf("got %q, want %q", base.String(), want)
	}
	for name, change := range map[string]func(*Filter){
		"tenant":    func(f *Filter) { f.TenantID = "acme2" },
		"states":    func(f *Filter) { f.States = f.States[:1] },
		"all":       func(f *Filter) { f.States = nil },
		"space":     func(f *Filter) { f.KnowledgeSpaceID = nil },
		"older":     func(f *Filter) { f.OlderThan = time.Hour },
		"newer":     func(f *Filter) { f.NewerThan = time.Hour },
		"errorCode": func(f *Filter) { f.ErrorCode = "E_OTHER" },
		// A tenant that holds what looks like another field.
		"injected": func(f *Filter) { f.TenantID = `acme" state=queued` },
	} {
		f := base
		change(&f)
		if f.String() == base.String() {
			t.Errorf("%s: a changed filter has the same line %q", name, f.String())
		}
	}
}
