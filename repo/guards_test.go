package repo_test

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
)

// The guards of db/queries are copied into every statement that needs
// them: sqlc queries are standalone statements, and a guard must stay
// visible in each statement's WHERE (no SQL function or view hides it).
// Each copy is marked:
//
//	-- guard:NAME [VARIANT]
//	AND ...
//	-- end guard
//
// A repeated SET list is not a guard (it writes, it does not filter), and
// is marked as a block, the same way:
//
//	-- block:NAME [VARIANT]
//	column = ..., ...
//	-- end block
//
// A block may hold another block (the exhausted attempt's failure holds
// the failure, which holds the lease's end); the outer copy's text then
// includes the inner one's lines. Guards do not nest, and a guard never sits in a block.
//
// TestQueryGuards checks that every copy equals the one canonical text
// below, whitespace aside (and a leading AND or WHERE, or a trailing
// comma), and that every statement that needs a guard or block has it:
// a guard once, a block once for each place that writes what it covers.
// The batch variant is the same text with the parameters bound to the
// input columns of a batch statement (CompleteMany).

// canonicalGuards is each guard's one text.
var canonicalGuards = map[string]string{
	// A live lease of this worker: running, same token and worker, not
	// expired, and the outbox row still leased (the relay has not
	// reclaimed it).
	"lease": `
		AND a.run_state = 'running'
		AND a.lease_token = @lease_token::uuid
		AND a.worker_id = @worker_id::text
		AND a.lease_expires_at > coalesce(sqlc.narg('now')::timestamptz, now())
		AND o.status = 'leased'`,
	// A candidate publication given with a lease holder's write: none, or
	// none bound yet and a 'candidate' publication with that fingerprint
	// in the attempt's own tenant and space, or the bound one again.
	"candidate": `
		AND (sqlc.narg('candidate_publication_id')::uuid IS NULL
		     OR (a.candidate_publication_id IS NULL
		         AND EXISTS (
		           SELECT 1
		             FROM projection_set_publications p
		            WHERE p.tenant_id = a.tenant_id
		              AND p.knowledge_space_id = a.knowledge_space_id
		              AND p.id = sqlc.narg('candidate_publication_id')::uuid
		              AND p.fingerprint = sqlc.narg('candidate_fingerprint')::varchar
		              AND p.status = 'candidate'))
		     OR (a.candidate_publication_id = sqlc.narg('candidate_publication_id')::uuid
		         AND a.candidate_fingerprint = sqlc.narg('candidate_fingerprint')::varchar))`,
	// The attempt waits for a delivery: the relay may record a
	// publication for it, or dead-letter it.
	"awaiting-delivery": `
		AND (a.run_state IN ('dispatch_pending', 'retry_wait', 'queued')
		     OR (a.run_state = 'running'
		         AND a.lease_expires_at <= coalesce(sqlc.narg('now')::timestamptz, now())))`,
	// An outbox row due for delivery (direct delivery's probe of each
	// live attempt's row), one boolean test (IS TRUE) so the row is
	// found by attempt_id alone.
	"outbox-due": `
		AND ((o.status IN ('pending', 'dispatched', 'leased')
		      AND o.available_at <= coalesce(sqlc.narg('now')::timestamptz, now()))
		     OR (o.status = 'dispatching'
		         AND o.locked_until <= coalesce(sqlc.narg('now')::timestamptz, now()))) IS TRUE`,
	// A control-plane call's scope: the attempt is the named tenant's, in
	// the named space, and at the expected row version when one is given.
	"control": `
		AND a.tenant_id = @tenant_id
		AND a.knowledge_space_id = @knowledge_space_id
		AND (sqlc.narg('expected_row_version')::integer IS NULL
		     OR a.row_version = sqlc.narg('expected_row_version')::integer)`,
	// A delivery's fence: the delivered job ids are the attempt's current
	// ones, and the attempt is claimable (queued, or running with an
	// expired lease: a lost worker's).
	"delivery": `
		AND a.queue_job_id = @queue_job_id::text
		AND (sqlc.narg('external_job_id')::text IS NULL
		     OR a.external_job_id = sqlc.narg('external_job_id')::text)
		AND (a.run_state = 'queued'
		     OR (a.run_state = 'running'
		         AND a.lease_expires_at <= coalesce(sqlc.narg('now')::timestamptz, now())))`,
}

// canonicalBlocks is each block's one text.
var canonicalBlocks = map[string]string{
	// The lease's end: the columns of a lease, cleared whenever an
	// attempt leaves running other than by a new lease.
	"lease-end": `
		worker_id = NULL, lease_token = NULL, lease_expires_at = NULL, heartbeat_at = NULL,`,
	// The relay lock's end: the columns of a relay's claim, cleared
	// whenever an outbox row moves to another status than dispatching.
	"relay-lock-end": `
		locked_by = NULL, lock_token = NULL, locked_until = NULL,`,
	// The success: succeeded at published, out of the active slot,
	// completed now, lease ended, no retry pending.
	"succeeded": `
		SET run_state = 'succeeded',
		    checkpoint = 'published',
		    active_slot = NULL,
		    completed_at = coalesce(sqlc.narg('now')::timestamptz, now()),
		    worker_id = NULL, lease_token = NULL, lease_expires_at = NULL, heartbeat_at = NULL,
		    retry_at = NULL,`,
	// The failure: failed, out of the active slot, completed now, lease
	// ended, no retry pending; the statement then writes its error.
	"failed": `
		SET run_state = 'failed',
		    active_slot = NULL,
		    completed_at = coalesce(sqlc.narg('now')::timestamptz, now()),
		    worker_id = NULL, lease_token = NULL, lease_expires_at = NULL, heartbeat_at = NULL,
		    retry_at = NULL,`,
	// The exhausted attempt's failure: the failure, and the error that
	// says so.
	"exhausted": `
		SET run_state = 'failed',
		    active_slot = NULL,
		    completed_at = coalesce(sqlc.narg('now')::timestamptz, now()),
		    worker_id = NULL, lease_token = NULL, lease_expires_at = NULL, heartbeat_at = NULL,
		    retry_at = NULL,
		    last_error_code = 'EXECUTION_ATTEMPTS_EXHAUSTED',
		    last_error_message = 'execution attempts exhausted (' || a.execution_attempts || ' of ' || a.max_execution_attempts || ')',
		    row_version = a.row_version + 1,
		    updated_at = coalesce(sqlc.narg('now')::timestamptz, now())`,
}

// guardVariants bind a canonical text's parameters to another
// statement's inputs.
var guardVariants = map[string]*strings.Replacer{
	"": strings.NewReplacer(),
	"batch": strings.NewReplacer(
		"@lease_token::uuid", "input.lease_token",
		"@worker_id::text", "input.worker_id",
		"sqlc.narg('candidate_publication_id')::uuid", "input.candidate_publication_id",
		"sqlc.narg('candidate_fingerprint')::varchar", "input.candidate_fingerprint",
	),
}

// guardNeeds says which statements need a guard, by the parameters they
// take (comments aside): a lease token (a lease-fenced worker transition),
// a candidate publication, a relay lock token (a claimed row's
// publication recorded or released), an expected row version (a
// control-plane transition of an existing attempt), or a delivered queue
// job id (a delivery fenced by it).
var guardNeeds = map[string]*regexp.Regexp{
	"lease":             regexp.MustCompile(`@lease_tokens?\b`),
	"candidate":         regexp.MustCompile(`sqlc\.narg\('candidate_publication_id'\)|@candidate_publication_ids\b`),
	"awaiting-delivery": regexp.MustCompile(`@lock_tokens?\b`),
	"control":           regexp.MustCompile(`sqlc\.narg\('expected_row_version'\)`),
	"outbox-due":        regexp.MustCompile(`SELECT o\.id FROM document_compilation_outbox o WHERE o\.attempt_id = a\.id\b`),
	"delivery":          regexp.MustCompile(`@queue_job_id\b`),
}

// blockNeeds says where statements need a block, by what they write
// (comments aside), one copy for each place that writes it: an attempt
// made terminal (active_slot NULL) or sent back to wait (retry_wait,
// dispatch_pending) ends its lease; an outbox row moved to any status but
// dispatching (a literal one, or a CASE) ends its relay lock; a success
// and a failure write their whole state; an exhausted attempt's failure
// writes its error code.
var blockNeeds = map[string]*regexp.Regexp{
	"lease-end":      regexp.MustCompile(`active_slot = NULL|SET run_state = '(retry_wait|dispatch_pending)'`),
	"relay-lock-end": regexp.MustCompile(`UPDATE document_compilation_outbox o SET status = (CASE\b|'(pending|dispatched|leased|completed|dead|canceled)')`),
	"succeeded":      regexp.MustCompile(`SET run_state = 'succeeded'`),
	"failed":         regexp.MustCompile(`SET run_state = 'failed'`),
	"exhausted":      regexp.MustCompile(`'EXECUTION_ATTEMPTS_EXHAUSTED'`),
}

// perPlaceGuards are needed once for each place that matches their need
// (a probe repeated in one statement), not once per statement.
var perPlaceGuards = map[string]bool{"outbox-due": true}

// leaseLock is the locking clause of a lease-fenced statement: the guard
// reads both rows, and each is locked, the attempt first.
const leaseLock = "FOR UPDATE OF a, o"

func TestQueryGuards(t *testing.T) {
	t.Parallel()
	files := readQueries(t)
	for _, p := range checkGuards(files) {
		t.Error(p)
	}

	// Every guard and block is in use.
	used := map[string]int{}
	for _, q := range splitQueries(files) {
		copies, _ := markedCopies(q)
		for _, c := range copies {
			used[c.kind+":"+c.name]++
		}
	}
	for kind, canonical := range map[string]map[string]string{"guard": canonicalGuards, "block": canonicalBlocks} {
		for name := range canonical {
			if used[kind+":"+name] == 0 {
				t.Errorf("%s %s has no copy", kind, name)
			}
		}
	}
	t.Logf("copies: %v", used)
}

// TestQueryGuardsCatchMutations proves TestQueryGuards can fail: each
// mutation of the real query files must be reported.
func TestQueryGuardsCatchMutations(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, file, query, old, new, want string
	}{
		{"LeaseCopyDiffers", "worker.sql", "Fail", "AND o.status = 'leased'", "AND o.status IN ('leased', 'dispatching')",
			"worker.sql Fail: guard:lease differs"},
		{"LeaseBatchCopyDiffers", "worker.sql", "CompleteMany", "a.lease_expires_at > coalesce", "a.lease_expires_at >= coalesce",
			"worker.sql CompleteMany: guard:lease batch differs"},
		{"LeaseGuardMissing", "worker.sql", "ScheduleRetry", "-- guard:lease\n", "",
			"worker.sql ScheduleRetry: needs guard:lease"},
		{"LeaseGuardUnmarked", "worker.sql", "Heartbeat", "     -- end guard\n", "",
			"worker.sql Heartbeat: guard:lease not closed"},
		{"OutboxNotLocked", "worker.sql", "Advance", leaseLock, "FOR UPDATE OF a",
			"worker.sql Advance: lease-fenced but not locked " + leaseLock},
		{"LockOrderReversed", "worker.sql", "CompleteMany", leaseLock, "FOR UPDATE OF o, a",
			"worker.sql CompleteMany: lease-fenced but not locked " + leaseLock},
		{"CandidateCopyDiffers", "worker.sql", "Advance", "AND p.status = 'candidate'", "AND p.status IN ('candidate', 'validating')",
			"worker.sql Advance: guard:candidate differs"},
		{"CandidateBatchCopyDiffers", "worker.sql", "CompleteMany", "p.tenant_id = a.tenant_id", "p.tenant_id = p.tenant_id",
			"worker.sql CompleteMany: guard:candidate batch differs"},
		{"AwaitingDeliveryCopyDiffers", "outbox_relay.sql", "ReleaseOutbox", "'dispatch_pending', 'retry_wait', 'queued'", "'dispatch_pending', 'retry_wait', 'queued', 'running'",
			"outbox_relay.sql ReleaseOutbox: guard:awaiting-delivery differs"},
		{"AwaitingDeliveryMissing", "outbox_relay.sql", "MarkDispatched", "-- guard:awaiting-delivery\n", "-- guard:lease\n",
			"outbox_relay.sql MarkDispatched: needs guard:awaiting-delivery"},
		{"OutboxDueCopyDiffers", "direct_delivery.sql", "FetchLeases", "o.locked_until <= coalesce", "o.locked_until < coalesce",
			"direct_delivery.sql FetchLeases: guard:outbox-due differs"},
		{"OutboxDueOneOfTwoMissing", "direct_delivery.sql", "FetchLeases", "-- guard:outbox-due\n", "",
			"direct_delivery.sql FetchLeases: needs guard:outbox-due 2 times, has 1"},
		{"UnknownGuard", "worker.sql", "Advance", "-- guard:candidate\n", "-- guard:candidates\n",
			"worker.sql Advance: unknown guard:candidates"},
		{"ControlCopyDiffers", "control.sql", "RetryFailed", "AND a.knowledge_space_id = @knowledge_space_id", "AND a.knowledge_space_id IS NOT NULL",
			"control.sql RetryFailed: guard:control differs"},
		{"ControlGuardMissing", "control.sql", "EndAttempt", "-- guard:control\n", "",
			"control.sql EndAttempt: needs guard:control"},
		{"DeliveryCopyDiffers", "lease.sql", "FailExhausted", "OR a.external_job_id = sqlc.narg('external_job_id')::text", "OR true",
			"lease.sql FailExhausted: guard:delivery differs"},
		{"DeliveryGuardMissing", "lease.sql", "AcquireLease", "-- guard:delivery\n", "-- guard:lease\n",
			"lease.sql AcquireLease: needs guard:delivery"},
		{"LeaseEndCopyDiffers", "control.sql", "EndAttempt", "lease_expires_at = NULL, heartbeat_at = NULL", "lease_expires_at = NULL",
			"control.sql EndAttempt: block:lease-end differs"},
		{"LeaseEndBlockMissing", "worker.sql", "ScheduleRetry", "-- block:lease-end\n", "",
			"worker.sql ScheduleRetry: needs block:lease-end"},
		{"LeaseEndBlockUnclosed", "outbox_relay.sql", "ReleaseOutbox", "-- end block\n", "",
			"outbox_relay.sql ReleaseOutbox: block:failed not closed"},
		{"ExhaustedCopyDiffers", "direct_delivery.sql", "FetchLeases", "' of ' || a.max_execution_attempts", "' of ' || a.execution_attempts",
			"direct_delivery.sql FetchLeases: block:exhausted differs"},
		{"ExhaustedInnerLeaseEndDiffers", "lease.sql", "FailExhausted", "worker_id = NULL, lease_token = NULL", "lease_token = NULL",
			"lease.sql FailExhausted: block:exhausted differs"},
		{"ExhaustedBlockMissing", "lease.sql", "FailExhausted", "   -- block:exhausted\n", "",
			"lease.sql FailExhausted: needs block:exhausted"},
		{"UnknownBlock", "worker.sql", "Fail", "-- block:lease-end\n", "-- block:lease-ends\n",
			"worker.sql Fail: unknown block:lease-ends"},
		{"RelayLockEndCopyDiffers", "outbox_relay.sql", "MarkDispatched", "lock_token = NULL, locked_until = NULL", "lock_token = NULL",
			"outbox_relay.sql MarkDispatched: block:relay-lock-end differs"},
		{"RelayLockEndBlockMissing", "control.sql", "EndAttempt", "-- block:relay-lock-end\n", "",
			"control.sql EndAttempt: needs block:relay-lock-end"},
		{"RelayLockEndOneOfTwoMissing", "direct_delivery.sql", "FetchLeases", "-- block:relay-lock-end\n", "",
			"direct_delivery.sql FetchLeases: needs block:relay-lock-end 2 times, has 1"},
		{"RelayLockEndLineDropped", "worker.sql", "Fail", "         -- block:relay-lock-end\n         locked_by = NULL, lock_token = NULL, locked_until = NULL,\n         -- end block\n", "",
			"worker.sql Fail: needs block:relay-lock-end"},
		{"SucceededCopyDiffers", "worker.sql", "CompleteThrough", "checkpoint = 'published',", "checkpoint = 'smoke_eval_passed',",
			"worker.sql CompleteThrough: block:succeeded differs"},
		{"SucceededBatchCopyDiffers", "worker.sql", "CompleteMany", "completed_at = coalesce", "completed_at = coalesce(a.completed_at, now()), updated_at = coalesce",
			"worker.sql CompleteMany: block:succeeded differs"},
		{"SucceededBlockMissing", "worker.sql", "Complete", "-- block:succeeded\n", "",
			"worker.sql Complete: needs block:succeeded"},
		{"FailedCopyDiffers", "worker.sql", "Fail", "       retry_at = NULL,", "       retry_at = a.retry_at,",
			"worker.sql Fail: block:failed differs"},
		{"FailedInExhaustedDiffers", "direct_delivery.sql", "FetchLeases", "active_slot = NULL,", "active_slot = a.active_slot,",
			"direct_delivery.sql FetchLeases: block:failed differs"},
		{"FailedBlockMissing", "outbox_relay.sql", "ReleaseOutbox", "-- block:failed\n", "",
			"outbox_relay.sql ReleaseOutbox: needs block:failed"},
		{"GuardInBlock", "worker.sql", "Complete", "-- block:lease-end\n", "-- block:lease-end\n       -- guard:lease\n",
			"worker.sql Complete: block:lease-end not closed before"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			files := readQueries(t)
			files[tc.file] = mutateQuery(t, files[tc.file], tc.query, tc.old, tc.new)
			problems := checkGuards(files)
			for _, p := range problems {
				if strings.HasPrefix(p, tc.want) {
					return
				}
			}
			t.Errorf("want a problem %q; got %q", tc.want, problems)
		})
	}
}

// readQueries reads db/queries/*.sql by file name.
func readQueries(t *testing.T) map[string]string {
	t.Helper()
	paths, err := filepath.Glob(filepath.Join("..", "db", "queries", "*.sql"))
	if err != nil || len(paths) == 0 {
		t.Fatalf("no query files (%v)", err)
	}
	files := map[string]string{}
	for _, p := range paths {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		files[filepath.Base(p)] = string(b)
	}
	return files
}

// mutateQuery replaces the first old in query name's text of a file.
func mutateQuery(t *testing.T, file, name, old, new string) string {
	t.Helper()
	start := strings.Index(file, "-- name: "+name+" ")
	if start < 0 {
		t.Fatalf("no query %s", name)
	}
	end := len(file)
	if next := strings.Index(file[start+1:], "-- name: "); next >= 0 {
		end = start + 1 + next
	}
	body := file[start:end]
	if !strings.Contains(body, old) {
		t.Fatalf("query %s has no %q", name, old)
	}
	return file[:start] + strings.Replace(body, old, new, 1) + file[end:]
}

// sqlQuery is one named statement of a query file.
type sqlQuery struct {
	file, name string
	lines      []string
}

var nameLine = regexp.MustCompile(`^-- name: (\w+) :\w+`)

// splitQueries splits the files into their named statements, in file and
// line order.
func splitQueries(files map[string]string) []sqlQuery {
	names := make([]string, 0, len(files))
	for f := range files {
		names = append(names, f)
	}
	sort.Strings(names)
	var out []sqlQuery
	for _, f := range names {
		var cur *sqlQuery
		for _, line := range strings.Split(files[f], "\n") {
			if m := nameLine.FindStringSubmatch(line); m != nil {
				out = append(out, sqlQuery{file: f, name: m[1]})
				cur = &out[len(out)-1]
				continue
			}
			if cur != nil {
				cur.lines = append(cur.lines, line)
			}
		}
	}
	return out
}

// markedCopy is one marked copy of a guard or a block.
type markedCopy struct {
	kind, name, variant, text string
}

// label is how problems name the copy: "guard:lease batch".
func (c markedCopy) label() string {
	return strings.TrimSpace(c.kind + ":" + c.name + " " + c.variant)
}

// markedCopies returns a statement's marked guards and blocks and the
// problems of their markers.
func markedCopies(q sqlQuery) ([]markedCopy, []string) {
	type open struct {
		copy markedCopy
		body []string
	}
	var copies []markedCopy
	var problems []string
	var stack []*open
	for _, line := range q.lines {
		trimmed := strings.TrimSpace(line)
		kind := ""
		switch {
		case strings.HasPrefix(trimmed, "-- guard:"):
			kind = "guard"
		case strings.HasPrefix(trimmed, "-- block:"):
			kind = "block"
		}
		switch {
		case kind != "":
			// Only a block opens inside another, and only inside a block.
			if n := len(stack); n > 0 && (kind != "block" || stack[n-1].copy.kind != "block") {
				problems = append(problems, fmt.Sprintf("%s not closed before %q", stack[n-1].copy.label(), trimmed))
				stack = stack[:n-1]
			}
			fields := strings.Fields(strings.TrimPrefix(trimmed, "-- "+kind+":"))
			o := &open{copy: markedCopy{kind: kind}}
			if len(fields) > 0 {
				o.copy.name = fields[0]
			}
			if len(fields) > 1 {
				o.copy.variant = strings.Join(fields[1:], " ")
			}
			stack = append(stack, o)
		case trimmed == "-- end guard" || trimmed == "-- end block":
			kind = strings.TrimPrefix(trimmed, "-- end ")
			n := len(stack)
			if n == 0 || stack[n-1].copy.kind != kind {
				problems = append(problems, fmt.Sprintf("%s without a %s", trimmed, kind))
				continue
			}
			o := stack[n-1]
			stack = stack[:n-1]
			o.copy.text = normalizeSQL(strings.Join(o.body, "\n"))
			copies = append(copies, o.copy)
		default:
			for _, o := range stack {
				o.body = append(o.body, line)
			}
		}
	}
	for _, o := range stack {
		problems = append(problems, o.copy.label()+" not closed")
	}
	return copies, problems
}

// checkGuards returns every problem of the files' guards and blocks, each
// prefixed with the file and the statement.
func checkGuards(files map[string]string) []string {
	var problems []string
	canonicals := map[string]map[string]string{"guard": canonicalGuards, "block": canonicalBlocks}
	needs := map[string]map[string]*regexp.Regexp{"guard": guardNeeds, "block": blockNeeds}
	for _, q := range splitQueries(files) {
		where := q.file + " " + q.name + ": "
		copies, markerProblems := markedCopies(q)
		for _, p := range markerProblems {
			problems = append(problems, where+p)
		}
		have := map[string]int{}
		for _, c := range copies {
			canonical, ok := canonicals[c.kind][c.name]
			bind, okVariant := guardVariants[c.variant]
			switch {
			case !ok:
				problems = append(problems, where+"unknown "+c.label())
				continue
			case !okVariant:
				problems = append(problems, where+c.label()+": unknown variant")
				continue
			}
			have[c.kind+":"+c.name]++
			if want := normalizeSQL(bind.Replace(canonical)); c.text != want {
				problems = append(problems, fmt.Sprintf("%s%s differs from the canonical text:\n  got  %s\n  want %s", where, c.label(), c.text, want))
			}
		}
		code := normalizeSQL(strings.Join(q.lines, "\n"))
		for kind, byName := range needs {
			for name, need := range byName {
				// A guard is needed once per statement, a block once per
				// place that writes what it covers.
				want := len(need.FindAllStringIndex(code, -1))
				if kind == "guard" && !perPlaceGuards[name] {
					want = min(want, 1)
				}
				if got := have[kind+":"+name]; want > 0 && got != want {
					problems = append(problems, fmt.Sprintf("%sneeds %s:%s %s, has %d", where, kind, name, times(want), got))
				}
			}
		}
		if guardNeeds["lease"].MatchString(code) && !strings.Contains(code, leaseLock) {
			problems = append(problems, where+"lease-fenced but not locked "+leaseLock)
		}
	}
	return problems
}

// times says how many copies a statement needs: "exactly once", "2 times".
func times(n int) string {
	if n == 1 {
		return "exactly once"
	}
	return fmt.Sprintf("%d times", n)
}

var (
	lineComment = regexp.MustCompile(`--[^\n]*`)
	spaces      = regexp.MustCompile(`\s+`)
	openParen   = regexp.MustCompile(`\(\s+`)
	closeParen  = regexp.MustCompile(`\s+\)`)
	connective  = regexp.MustCompile(`^(AND|WHERE) `)
)

// normalizeSQL drops line comments, collapses whitespace (none after an
// opening or before a closing parenthesis), a leading AND or WHERE (a
// guard's connective) and a trailing comma (a block's, before the next
// column of its SET list). The query files have no "--" inside string
// literals.
func normalizeSQL(s string) string {
	s = lineComment.ReplaceAllString(s, "")
	s = strings.TrimSpace(spaces.ReplaceAllString(s, " "))
	s = openParen.ReplaceAllString(s, "(")
	s = closeParen.ReplaceAllString(s, ")")
	s = strings.TrimSuffix(s, ",")
	return connective.ReplaceAllString(s, "")
}
