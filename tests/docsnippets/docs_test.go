package docsnippets

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// root is the repository, from this package's directory.
const root = "../.."

// snippetSources are the compiled files the documents' Go is taken from:
// this package and the quick start's (the quick start itself, and the test
// kit's example that its tests run).
var snippetSources = []string{"tests/docsnippets/*.go", "kfsdbtest/quickstart/*.go"}

// readmeMaxLines is the README's budget (issue 42): the adopter's page,
// with the guides in docs/.
const readmeMaxLines = 400

// documents are the README and the guides.
func documents(t *testing.T) []string {
	t.Helper()
	guides, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	return append([]string{filepath.Join(root, "README.md")}, guides...)
}

func read(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// goBlocks returns the bodies of a Markdown text's ```go blocks.
func goBlocks(doc string) []string {
	var blocks []string
	lines := strings.Split(doc, "\n")
	for i := 0; i < len(lines); i++ {
		if strings.TrimSpace(lines[i]) != "```go" {
			continue
		}
		var b []string
		for i++; i < len(lines) && strings.TrimSpace(lines[i]) != "```"; i++ {
			b = append(b, lines[i])
		}
		blocks = append(blocks, strings.Join(b, "\n"))
	}
	return blocks
}

// normalize keeps a text's non-blank lines with their runs of white space
// made one space, so that indentation (tabs in Go, spaces in a document)
// and gofmt's alignment of trailing comments do not count.
func normalize(text string) []string {
	var out []string
	for _, l := range strings.Split(text, "\n") {
		if f := strings.Fields(l); len(f) > 0 {
			out = append(out, strings.Join(f, " "))
		}
	}
	return out
}

// contains reports whether block's lines appear, in order and adjacent,
// in source's.
func contains(source, block []string) bool {
	if len(block) == 0 {
		return true
	}
	for i := 0; i+len(block) <= len(source); i++ {
		match := true
		for j := range block {
			if source[i+j] != block[j] {
				match = false
				break
			}
		}
		if match {
			return true
		}
	}
	return false
}

func TestContains(t *testing.T) {
	src := normalize("func f() {\n\ta := 1 // one\n\tb := 2\n}\n")
	for _, c := range []struct {
		block string
		want  bool
	}{
		{"a := 1    // one\n    b := 2", true},
		{"a := 1 // one\n\n\tb := 2", true},
		{"b := 2\na := 1 // one", false},
		{"a := 1 // two", false},
		{"a := 1 // one\n}\nb := 2", false},
	} {
		if got := contains(src, normalize(c.block)); got != c.want {
			t.Errorf("contains(%q) = %v, want %v", c.block, got, c.want)
		}
	}
}

// TestEverySnippetCompiles: every ```go block of the README and the guides
// is text of a file that make test compiles, so a snippet that no longer
// compiles, or was never compiled, fails here.
func TestEverySnippetCompiles(t *testing.T) {
	var sources [][]string
	for _, pattern := range snippetSources {
		files, err := filepath.Glob(filepath.Join(root, pattern))
		if err != nil || len(files) == 0 {
			t.Fatalf("no snippet sources %s (%v)", pattern, err)
		}
		for _, f := range files {
			sources = append(sources, normalize(read(t, f)))
		}
	}
	n := 0
	for _, doc := range documents(t) {
		for i, block := range goBlocks(read(t, doc)) {
			n++
			found := false
			for _, s := range sources {
				if contains(s, normalize(block)) {
					found = true
					break
				}
			}
			if !found {
				t.Errorf("%s: Go block %d is in no compiled file (%s); put it there, as it stands in the document:\n%s",
					strings.TrimPrefix(doc, root+"/"), i+1, strings.Join(snippetSources, ", "), block)
			}
		}
	}
	if n < 10 {
		t.Errorf("found %d Go blocks in the documents; the reader lost track of them", n)
	}
}

var (
	mdLink    = regexp.MustCompile(`\]\(([^)\s]+)\)`)
	datedName = regexp.MustCompile(`-20\d\d-\d\d-\d\d`)
)

// TestDocsByReader: the README fits its budget and links every guide; a
// relative link in a document names a file that exists; no dated run file
// sits in docs/'s top level, and each one in docs/runs is named by a
// document.
func TestDocsByReader(t *testing.T) {
	readme := read(t, filepath.Join(root, "README.md"))
	if n := strings.Count(readme, "\n"); n > readmeMaxLines {
		t.Errorf("README.md has %d lines, more than %d: move the detail to a guide in docs/", n, readmeMaxLines)
	}
	docs := documents(t)
	for _, g := range docs[1:] {
		name := "docs/" + filepath.Base(g)
		if !strings.Contains(readme, "]("+name+")") {
			t.Errorf("README.md does not link %s", name)
		}
	}
	var all strings.Builder
	for _, d := range docs {
		text := read(t, d)
		all.WriteString(text)
		for _, m := range mdLink.FindAllStringSubmatch(text, -1) {
			target := m[1]
			if strings.Contains(target, "://") || strings.HasPrefix(target, "#") || strings.HasPrefix(target, "mailto:") {
				continue
			}
			target, _, _ = strings.Cut(target, "#")
			if _, err := os.Stat(filepath.Join(filepath.Dir(d), target)); err != nil {
				t.Errorf("%s links %s, which does not exist", strings.TrimPrefix(d, root+"/"), m[1])
			}
		}
	}
	top, err := os.ReadDir(filepath.Join(root, "docs"))
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range top {
		if !e.IsDir() && datedName.MatchString(e.Name()) {
			t.Errorf("docs/%s is a dated run file in docs/'s top level: move it to docs/runs/", e.Name())
		}
	}
	runs, err := os.ReadDir(filepath.Join(root, "docs", "runs"))
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range runs {
		if !strings.Contains(all.String(), e.Name()) {
			t.Errorf("docs/runs/%s is named by no document: cite it where its figures are, or remove it", e.Name())
		}
	}
}
