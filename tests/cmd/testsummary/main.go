// Command testsummary reads `go test -json` events and says what ran.
//
//	go test -json ./... | testsummary -echo -log run.jsonl   # per module
//	testsummary -summary run.jsonl                             # at the end
//
// -echo prints what plain `go test` prints (package lines, build errors,
// and a test's output only when it failed), and appends every event to the
// -log file. -summary reads that file and prints, for the whole run, the
// packages that passed, failed or had no tests, every skipped test with
// its reason (a package whose tests all skipped is not a pass: it is listed
// as such), and a closing line "tests: N passed, N failed, N skipped". It
// exits 1 when a test or package failed.
package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"sort"
	"strings"
)

// event is one line of `go test -json` (cmd/test2json).
type event struct {
	Action  string
	Package string
	Test    string
	Output  string
	// ImportPath is set on build-output and build-fail events.
	ImportPath string
}

func main() {
	echo := flag.Bool("echo", false, "print plain go test output for the events on stdin and append them to -log")
	logPath := flag.String("log", "", "with -echo: file the events are appended to")
	summary := flag.String("summary", "", "print the summary of the events in this file")
	flag.Parse()
	var err error
	switch {
	case *echo && *logPath != "":
		err = runEcho(os.Stdin, os.Stdout, *logPath)
	case *summary != "":
		var failed bool
		failed, err = runSummary(*summary, os.Stdout)
		if err == nil && failed {
			os.Exit(1)
		}
	default:
		err = errors.New("usage: testsummary -echo -log FILE < events | testsummary -summary FILE")
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "testsummary:", err)
		os.Exit(2)
	}
}

// runEcho copies events from in to the log and prints them as plain go
// test would. Lines that are not JSON (go's own errors before the run) are
// printed as they are.
func runEcho(in io.Reader, out io.Writer, logPath string) error {
	logFile, err := os.OpenFile(logPath, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	defer logFile.Close()
	w := bufio.NewWriter(logFile)
	defer w.Flush()
	// A test's output is held until it ends: printed if it failed.
	held := map[string][]string{}
	sc := bufio.NewScanner(in)
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	for sc.Scan() {
		line := sc.Bytes()
		var ev event
		if json.Unmarshal(line, &ev) != nil || (ev.Action == "" && ev.ImportPath == "") {
			fmt.Fprintln(out, string(line))
			continue
		}
		w.Write(line)
		w.WriteByte('\n')
		key := ev.Package + "\x00" + ev.Test
		switch {
		case ev.Action == "build-output":
			fmt.Fprint(out, ev.Output)
		case ev.Action == "output" && ev.Test == "":
			if ev.Output != "PASS\n" && !strings.HasPrefix(ev.Output, "=== ") && !strings.HasPrefix(ev.Output, "--- ") {
				fmt.Fprint(out, ev.Output)
			}
		case ev.Action == "output":
			held[key] = append(held[key], ev.Output)
		case ev.Action == "fail" && ev.Test != "":
			fmt.Fprint(out, strings.Join(held[key], ""))
			delete(held, key)
		case ev.Action == "fail":
			// The package failed with tests still running (go test's
			// -timeout panic is their output): print what they said.
			printUnended(out, held, ev.Package)
		case ev.Test != "" && (ev.Action == "pass" || ev.Action == "skip"):
			delete(held, key)
		}
	}
	return sc.Err()
}

// printUnended prints, and forgets, the held output of pkg's tests that
// never ended, each under a line naming it, in name order.
func printUnended(out io.Writer, held map[string][]string, pkg string) {
	var keys []string
	for key := range held {
		if strings.HasPrefix(key, pkg+"\x00") {
			keys = append(keys, key)
		}
	}
	slices.Sort(keys)
	for _, key := range keys {
		_, test, _ := strings.Cut(key, "\x00")
		fmt.Fprintf(out, "--- %s: still running when the package failed:\n%s", test, strings.Join(held[key], ""))
		delete(held, key)
	}
}

// result is what became of one package in the run.
type result struct {
	pkg                     string
	outcome                 string // ok, FAIL, no test files
	passed, failed, skipped int
}

// runSummary prints the run's summary and reports whether anything failed.
func runSummary(logPath string, out io.Writer) (bool, error) {
	f, err := os.Open(logPath)
	if err != nil {
		return false, err
	}
	defer f.Close()
	pkgs := map[string]*result{}
	var order []string
	skipReason := map[string][]string{} // package + test -> output lines
	type skip struct{ pkg, test, reason string }
	var skips []skip
	var buildFailed []string
	pkg := func(name string) *result {
		if r, ok := pkgs[name]; ok {
			return r
		}
		r := &result{pkg: name}
		pkgs[name] = r
		order = append(order, name)
		return r
	}
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	for sc.Scan() {
		var ev event
		if json.Unmarshal(sc.Bytes(), &ev) != nil {
			continue
		}
		if ev.Action == "build-fail" {
			buildFailed = append(buildFailed, ev.ImportPath)
			continue
		}
		if ev.Package == "" {
			continue
		}
		r := pkg(ev.Package)
		key := ev.Package + "\x00" + ev.Test
		switch {
		case ev.Test != "" && ev.Action == "output":
			skipReason[key] = append(skipReason[key], ev.Output)
		case ev.Test != "" && ev.Action == "pass":
			r.passed++
			delete(skipReason, key)
		case ev.Test != "" && ev.Action == "fail":
			r.failed++
			delete(skipReason, key)
		case ev.Test != "" && ev.Action == "skip":
			r.skipped++
			skips = append(skips, skip{ev.Package, ev.Test, reasonOf(skipReason[key])})
			delete(skipReason, key)
		case ev.Test == "" && ev.Action == "pass":
			r.outcome = "ok"
		case ev.Test == "" && ev.Action == "fail":
			r.outcome = "FAIL"
		case ev.Test == "" && ev.Action == "skip":
			r.outcome = "no test files"
		}
	}
	if err := sc.Err(); err != nil {
		return false, err
	}

	var ok, failedPkgs, noTests, allSkipped int
	var passed, failed, skipped int
	for _, name := range order {
		r := pkgs[name]
		passed, failed, skipped = passed+r.passed, failed+r.failed, skipped+r.skipped
		switch {
		case r.outcome == "FAIL" || r.failed > 0:
			failedPkgs++
		case r.outcome == "no test files":
			noTests++
		case r.outcome == "ok" && r.passed == 0 && r.skipped > 0:
			allSkipped++
		case r.outcome == "ok":
			ok++
		}
	}
	fmt.Fprintf(out, "== make test summary: %d packages passed, %d failed, %d had every test skipped, %d without tests\n",
		ok, failedPkgs+len(buildFailed), allSkipped, noTests)
	for _, name := range order {
		r := pkgs[name]
		switch {
		case r.outcome == "FAIL" || r.failed > 0:
			fmt.Fprintf(out, "FAIL  %s (%d passed, %d failed, %d skipped)\n", name, r.passed, r.failed, r.skipped)
		case r.outcome == "ok" && r.passed == 0 && r.skipped > 0:
			fmt.Fprintf(out, "SKIP  %s (every test skipped: not tested here)\n", name)
		case r.outcome == "ok":
			fmt.Fprintf(out, "ok    %s (%d passed, %d skipped)\n", name, r.passed, r.skipped)
		}
	}
	for _, p := range buildFailed {
		fmt.Fprintf(out, "FAIL  %s (build failed)\n", p)
	}
	if len(skips) > 0 {
		sort.SliceStable(skips, func(i, j int) bool { return skips[i].pkg < skips[j].pkg })
		fmt.Fprintf(out, "== skipped tests (%d), with the reason each gave\n", len(skips))
		for _, s := range skips {
			fmt.Fprintf(out, "SKIP  %s %s: %s\n", s.pkg, s.test, s.reason)
		}
	}
	fmt.Fprintf(out, "tests: %d passed, %d failed, %d skipped\n", passed, failed+len(buildFailed), skipped)
	return failed > 0 || failedPkgs > 0 || len(buildFailed) > 0, nil
}

// reasonOf picks the skip message out of a skipped test's output: every
// line but go test's own "=== RUN/PAUSE/CONT" and "--- SKIP" lines.
func reasonOf(lines []string) string {
	var reason []string
	for _, l := range lines {
		t := strings.TrimSpace(l)
		if t == "" || strings.HasPrefix(t, "=== ") || strings.HasPrefix(t, "--- ") {
			continue
		}
		reason = append(reason, t)
	}
	if len(reason) == 0 {
		return "(no reason given)"
	}
	return strings.Join(reason, " ")
}
