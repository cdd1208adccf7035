package kfsdbtest_test

import (
	"go/parser"
	"go/token"
	"os"
	"strings"
	"testing"
)

// TestPackageDocIsDocexample: the code block of the package documentation
// (go doc github.com/knowledgefs/kfsdb/kfsdbtest) is
// internal/docexample/doc_test.go from its TestMain on, byte for byte, so
// go test compiles and runs the example the documentation shows and it
// cannot drift from the kit's API.
func TestPackageDocIsDocexample(t *testing.T) {
	f, err := parser.ParseFile(token.NewFileSet(), "kfsdbtest.go", nil, parser.PackageClauseOnly|parser.ParseComments)
	if err != nil {
		t.Fatal(err)
	}
	if f.Doc == nil {
		t.Fatal("kfsdbtest.go has no package documentation")
	}
	doc := firstCodeBlock(f.Doc.Text())
	src, err := os.ReadFile("internal/docexample/doc_test.go")
	if err != nil {
		t.Fatal(err)
	}
	i := strings.Index(string(src), "func TestMain(")
	if i < 0 {
		t.Fatal("internal/docexample/doc_test.go has no TestMain")
	}
	if want := strings.TrimSpace(string(src[i:])); doc != want {
		t.Errorf("the package documentation's code block differs from internal/docexample/doc_test.go; copy the file from TestMain on into the comment.\ndoc:\n%s\nfile:\n%s", doc, want)
	}
}

// firstCodeBlock returns the first code block (indented lines) of a doc
// comment's text, its indentation removed.
func firstCodeBlock(text string) string {
	var block strings.Builder
	for line := range strings.Lines(text) {
		code, indented := strings.CutPrefix(line, "\t")
		switch {
		case indented:
			block.WriteString(code)
		case block.Len() > 0 && strings.TrimSpace(line) == "":
			block.WriteString("\n") // a blank line inside the block
		case block.Len() > 0:
			return strings.TrimSpace(block.String())
		}
	}
	return strings.TrimSpace(block.String())
}
