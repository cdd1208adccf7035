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
// TestQueryGuards checks that every copy equals the one canonical text
// below, whitespace aside (and a leading AND or WHERE), and that every
// statement that needs a guard has it. The batch variant is the same text
// with the parameters bound to the input columns of a batch statement
// (CompleteMany).

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
// a candidate publication, or a relay lock token (a claimed row's
// publication recorded or released).
var guardNeeds = map[string]*regexp.Regexp{
	"lease":             regexp.MustCompile(`@lease_tokens?\b`),
	"candidate":         regexp.MustCompile(`sqlc\.narg\('candidate_publication_id'\)|@candidate_publication_ids\b`),
	"awaiting-delivery": regexp.MustCompile(`@lock_tokens?\b`),
}

// leaseLock is the locking clause of a lease-fenced statement: the guard
// reads both rows, and each is locked, the attempt first.
const leaseLock = "FOR UPDATE OF a, o"

func TestQueryGuards(t *testing.T) {
	t.Parallel()
	files := readQueries(t)
	for _, p := range checkGuards(files) {
		t.Error(p)
	}

	// Every guard is in use.
	used := map[string]int{}
	for _, q := range splitQueries(files) {
		copies, _ := guardCopies(q)
		for _, c := range copies {
			used[c.name]++
		}
	}
	for name := range canonicalGuards {
		if used[name] == 0 {
			t.Errorf("guard %s has no copy", name)
		}
	}
	t.Logf("guard copies: %v", used)
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
		{"UnknownGuard", "worker.sql", "Advance", "-- guard:candidate\n", "-- guard:candidates\n",
			"worker.sql Advance: unknown guard:candidates"},
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

// guardCopy is one marked copy of a guard.
type guardCopy struct {
	name, variant, text string
}

// guardCopies returns a statement's marked guards and the problems of its
// markers.
func guardCopies(q sqlQuery) ([]guardCopy, []string) {
	var copies []guardCopy
	var problems []string
	var open *guardCopy
	var body []string
	for _, line := range q.lines {
		trimmed := strings.TrimSpace(line)
		switch {
		case strings.HasPrefix(trimmed, "-- guard:"):
			if open != nil {
				problems = append(problems, fmt.Sprintf("guard:%s not closed before %q", open.name, trimmed))
			}
			fields := strings.Fields(strings.TrimPrefix(trimmed, "-- guard:"))
			open, body = &guardCopy{}, nil
			if len(fields) > 0 {
				open.name = fields[0]
			}
			if len(fields) > 1 {
				open.variant = strings.Join(fields[1:], " ")
			}
		case trimmed == "-- end guard":
			if open == nil {
				problems = append(problems, "-- end guard without a guard")
				continue
			}
			open.text = normalizeSQL(strings.Join(body, "\n"))
			copies = append(copies, *open)
			open = nil
		case open != nil:
			body = append(body, line)
		}
	}
	if open != nil {
		problems = append(problems, fmt.Sprintf("guard:%s not closed", open.name))
	}
	return copies, problems
}

// checkGuards returns every problem of the files' guards, each prefixed
// with the file and the statement.
func checkGuards(files map[string]string) []string {
	var problems []string
	for _, q := range splitQueries(files) {
		where := q.file + " " + q.name + ": "
		copies, markerProblems := guardCopies(q)
		for _, p := range markerProblems {
			problems = append(problems, where+p)
		}
		have := map[string]int{}
		for _, c := range copies {
			label := strings.TrimSpace("guard:" + c.name + " " + c.variant)
			canonical, ok := canonicalGuards[c.name]
			bind, okVariant := guardVariants[c.variant]
			switch {
			case !ok:
				problems = append(problems, where+"unknown "+label)
				continue
			case !okVariant:
				problems = append(problems, where+label+": unknown variant")
				continue
			}
			have[c.name]++
			if want := normalizeSQL(bind.Replace(canonical)); c.text != want {
				problems = append(problems, fmt.Sprintf("%s%s differs from the canonical text:\n  got  %s\n  want %s", where, label, c.text, want))
			}
		}
		code := normalizeSQL(strings.Join(q.lines, "\n"))
		for name, needs := range guardNeeds {
			if needs.MatchString(code) && have[name] != 1 {
				problems = append(problems, fmt.Sprintf("%sneeds guard:%s exactly once, has %d", where, name, have[name]))
			}
		}
		if guardNeeds["lease"].MatchString(code) && !strings.Contains(code, leaseLock) {
			problems = append(problems, where+"lease-fenced but not locked "+leaseLock)
		}
	}
	return problems
}

var (
	lineComment = regexp.MustCompile(`--[^\n]*`)
	spaces      = regexp.MustCompile(`\s+`)
	openParen   = regexp.MustCompile(`\(\s+`)
	closeParen  = regexp.MustCompile(`\s+\)`)
	connective  = regexp.MustCompile(`^(AND|WHERE) `)
)

// normalizeSQL drops line comments, collapses whitespace (none after an
// opening or before a closing parenthesis) and a leading AND or WHERE.
// The query files have no "--" inside string literals.
func normalizeSQL(s string) string {
	s = lineComment.ReplaceAllString(s, "")
	s = strings.TrimSpace(spaces.ReplaceAllString(s, " "))
	s = openParen.ReplaceAllString(s, "(")
	s = closeParen.ReplaceAllString(s, ")")
	return connective.ReplaceAllString(s, "")
}
