package main

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"golang.org/x/mod/module"
	modzip "golang.org/x/mod/zip"
)

func readAll(f TreeFile) ([]byte, error) {
	if f.open == nil {
		return nil, fmt.Errorf("file not in the commit")
	}
	rc, err := f.Open()
	if err != nil {
		return nil, err
	}
	defer rc.Close()
	return io.ReadAll(rc)
}

// override is files with the named ones' content replaced (or added).
func override(files []modzip.File, with map[string][]byte) []modzip.File {
	var out []modzip.File
	for _, f := range files {
		if _, ok := with[f.Path()]; !ok {
			out = append(out, f)
		}
	}
	for p, data := range with {
		if data != nil {
			out = append(out, DataFile(p, data))
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Path() < out[j].Path() })
	return out
}

// writeFiles writes files under dir, the named ones with the given content.
func writeFiles(dir string, files []modzip.File, with map[string][]byte) error {
	for _, f := range override(files, with) {
		dst := filepath.Join(dir, filepath.FromSlash(f.Path()))
		if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
			return err
		}
		rc, err := f.Open()
		if err != nil {
			return err
		}
		data, err := io.ReadAll(rc)
		rc.Close()
		if err != nil {
			return err
		}
		if err := os.WriteFile(dst, data, 0o644); err != nil {
			return err
		}
	}
	return nil
}

// lineDiff summarizes how b's lines differ from a's: "+N -M", with the
// changed lines when there are few.
func lineDiff(a, b []byte) string {
	count := func(s []byte) map[string]int {
		m := map[string]int{}
		for _, l := range strings.Split(string(s), "\n") {
			if strings.TrimSpace(l) != "" {
				m[l]++
			}
		}
		return m
	}
	ca, cb := count(a), count(b)
	var plus, minus []string
	for l, n := range cb {
		for i := ca[l]; i < n; i++ {
			plus = append(plus, strings.TrimSpace(l))
		}
	}
	for l, n := range ca {
		for i := cb[l]; i < n; i++ {
			minus = append(minus, strings.TrimSpace(l))
		}
	}
	sort.Strings(plus)
	sort.Strings(minus)
	s := fmt.Sprintf("+%d -%d lines", len(plus), len(minus))
	if len(plus)+len(minus) <= 6 {
		for _, l := range minus {
			s += "; - " + l
		}
		for _, l := range plus {
			s += "; + " + l
		}
	}
	return s
}

func orNone(list []string, suffix string) string {
	if len(list) == 0 {
		return "no kfsdb module"
	}
	return strings.Join(list, ", ") + suffix
}

func firstLines(s string, n int) string {
	lines := strings.SplitN(s, "\n", n+1)
	if len(lines) > n {
		lines = lines[:n]
	}
	return strings.Join(lines, "\n")
}

func mustEscape(p string) string {
	e, err := module.EscapePath(p)
	if err != nil {
		panic(err)
	}
	return e
}
