package console

import (
	"testing"
	"time"

	"github.com/knowledgefs/kfsdb/cmd/kfsdb/ops"
	"github.com/knowledgefs/kfsdb/repo"
)

// TestTenantFormsFromTheTable: the tenant page offers a form per row of
// ops' table of tenant actions that applies to the limits shown, with the
// row's name, words and fields, and no other. Mutations: Offered ignored
// (every row's form shown) fails the dontWant lists; a row's Button not
// read by the template fails the words.
func TestTenantFormsFromTheTable(t *testing.T) {
	s := pageServer(t)
	now := time.Now()
	for name, tc := range map[string]struct {
		limits         *repo.TenantLimit
		want, dontWant []string
	}{
		"None": {nil,
			[]string{`value="tenant-pause"`, `id="pause-form"`, `>Pause: no lease until resumed</button>`, `class="cancel" id="pause"`,
				`Reason (stored with the pause and recorded in the audit log)`, `id="set-form"`, `value="tenant-set-limit"`, `name="max_running"`, `id="set">Set</button>`},
			[]string{`value="tenant-resume"`, `value="tenant-clear-limit"`}},
		"PausedAndCapped": {&repo.TenantLimit{TenantID: "acme", MaxRunning: 3, PausedAt: &now, PauseReason: "incident 42"},
			[]string{`value="tenant-resume"`, `id="resume">Resume: lease its attempts again</button>`, `value="tenant-clear-limit"`, `name="clear" value="cap"`,
				`class="cancel" id="clear-cap">Lift the cap</button>`},
			[]string{`value="tenant-pause"`, `id="clear-rate"`, `Reason (stored with the pause`}},
		"RateLimited": {&repo.TenantLimit{TenantID: "acme", Rate: 2.5, Burst: 3},
			[]string{`value="tenant-pause"`, `class="cancel" id="clear-rate">Lift the rate limit</button>`},
			[]string{`value="tenant-resume"`, `id="clear-cap"`}},
	} {
		t.Run(name, func(t *testing.T) {
			p := tenantPage{TenantID: "acme", Limits: rowOf(tc.limits), Summary: ops.LimitSummary(tc.limits),
				Forms: s.tenantForms(principal{}, "acme", tc.limits, ops.LimitSummary(tc.limits), now)}
			requirePage(t, s, "tenant", p, tc.want, tc.dontWant)
		})
	}
}
