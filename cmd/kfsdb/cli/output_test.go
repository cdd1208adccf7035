package cli

import (
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// printsNoDatabaseText are the files whose commands print no text from the
// database nor from clients: the only ones that may call fmt's printers
// with arguments; every other file prints through printRow.
var printsNoDatabaseText = map[string]bool{
	"cli.go":            true, // errors (ExitCode escapes them) and help
	"command.go":        true, // usage
	"console.go":        true, // the console's address and login link
	"migrate.go":        true, // kfsdb's own migrations: names from the binary
	"migrate_status.go": true, // the same
	"output.go":         true, // the kit's helpers under this package's names
}

// TestCommandsPrintThroughPrintRow keeps the escaping unforgettable: a
// file that prints text from the database calls fmt.Fprintf, Fprint or
// Fprintln only with constant arguments.
func TestCommandsPrintThroughPrintRow(t *testing.T) {
	t.Parallel()
	files, err := filepath.Glob("*.go")
	require.NoError(t, err)
	fset := token.NewFileSet()
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") || printsNoDatabaseText[name] {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, 0)
		require.NoError(t, err)
		ast.Inspect(f, func(n ast.Node) bool {
			call, ok := n.(*ast.CallExpr)
			if !ok {
				return true
			}
			sel, ok := call.Fun.(*ast.SelectorExpr)
			if !ok || !strings.HasPrefix(sel.Sel.Name, "Fprint") {
				return true
			}
			if id, ok := sel.X.(*ast.Ident); !ok || id.Name != "fmt" {
				return true
			}
			for _, arg := range call.Args[1:] {
				if _, lit := arg.(*ast.BasicLit); !lit {
					t.Errorf("%s: fmt.%s with a non-constant argument: print it with printRow", fset.Position(call.Pos()), sel.Sel.Name)
					break
				}
			}
			return true
		})
	}
}
