package apiwalk

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// Exported returns the exported API declared in the non-test Go files of
// dir: "Func" for each exported function and "Type.Method" for each
// exported method of an exported type.
func Exported(t testing.TB, dir string) []string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatalf("apiwalk: read %s: %v", dir, err)
	}
	fset := token.NewFileSet()
	var names []string
	for _, e := range entries {
		name := e.Name()
		if !strings.HasSuffix(name, ".go") || strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, filepath.Join(dir, name), nil, parser.SkipObjectResolution)
		if err != nil {
			t.Fatalf("apiwalk: parse %s: %v", name, err)
		}
		for _, d := range f.Decls {
			fn, ok := d.(*ast.FuncDecl)
			if !ok || !fn.Name.IsExported() {
				continue
			}
			if fn.Recv == nil {
				names = append(names, fn.Name.Name)
				continue
			}
			if recv := receiverType(fn.Recv.List[0].Type); ast.IsExported(recv) {
				names = append(names, recv+"."+fn.Name.Name)
			}
		}
	}
	slices.Sort(names)
	return names
}

func receiverType(e ast.Expr) string {
	switch x := e.(type) {
	case *ast.StarExpr:
		return receiverType(x.X)
	case *ast.IndexExpr:
		return receiverType(x.X)
	case *ast.Ident:
		return x.Name
	}
	return ""
}

// RequireComplete fails t unless names (the walk's cases) are exactly the
// exported API of dir: an exported function without a case, or a case for
// one that is gone, fails the walk.
func RequireComplete(t testing.TB, dir string, names []string) {
	t.Helper()
	api := Exported(t, dir)
	have := slices.Sorted(slices.Values(names))
	var missing, stale []string
	for _, n := range api {
		if !slices.Contains(have, n) {
			missing = append(missing, n)
		}
	}
	for _, n := range have {
		if !slices.Contains(api, n) {
			stale = append(stale, n)
		}
	}
	if len(missing) > 0 || len(stale) > 0 {
		t.Fatalf("apiwalk: %s: exported without a case: %v; cases without an exported function: %v", dir, missing, stale)
	}
}
