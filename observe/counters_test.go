package observe_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"testing"

	"github.com/knowledgefs/kfsdb/observe"
)

// TestCountersListsEveryConstant keeps Counters in step with the Counter
// constants of observe.go, so adapters that register Counters() up front
// never miss one.
func TestCountersListsEveryConstant(t *testing.T) {
	t.Parallel()
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
			if id, ok := vs.Type.(*ast.Ident); ok && id.Name == "Counter" {
				for _, n := range vs.Names {
					declared = append(declared, n.Name)
				}
			}
		}
	}
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
