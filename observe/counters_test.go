package observe_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"testing"

	"github.com/knowledgefs/kfsdb/observe"
)

// TestCountersListsEveryConstant keeps Counters and Histograms in step
// with the constants of observe.go, so adapters that register them up
// front never miss one.
func TestCountersListsEveryConstant(t *testing.T) {
	t.Parallel()
	if got, want := len(observe.Histograms()), len(declaredOf(t, "Histogram")); got != want {
		t.Fatalf("Histograms() lists %d histograms, observe.go declares %d", got, want)
	}
	declared := declaredOf(t, "Counter")
	if got := len(observe.Counters()); got != len(declared) {
		t.Fatalf("Counters() lists %d counters, observe.go declares %d: %v", got, len(declared), declared)
	}
	seen := map[observe.Counter]bool{}
	for _, c := range observe.Counters() {
		if seen[c] {
			t.Fatalf("%s listed twice", c)
		}
		seen[c] = true
	}
}

// declaredOf returns the names of observe.go's constants of type typ.
func declaredOf(t *testing.T, typ string) []string {
	t.Helper()
	f, err := parser.ParseFile(token.NewFileSet(), "observe.go", nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	var declared []string
	for _, d := range f.Decls {
		g, ok := d.(*ast.GenDecl)
		if !ok || g.Tok != token.CONST {
			continue
		}
		for _, spec := range g.Specs {
			vs := spec.(*ast.ValueSpec)
			if id, ok := vs.Type.(*ast.Ident); ok && id.Name == typ {
				for _, n := range vs.Names {
					declared = append(declared, n.Name)
				}
			}
		}
	}
	return declared
}
