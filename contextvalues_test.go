package cninet_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// contextValuesAllowed are the only context values the code may set, by
// file and key type: the owner a caller names per request (WithOwner),
// and what the daemon knows of each connection. Options travel as values
// (GCOptions, ConnectOptions, fields of the operations), never in a
// context: a context value is read far from where it is set, and nothing
// checks it (issue 40).
var contextValuesAllowed = map[string][]string{
	"internal/attachments/records.go": {"ownerKey"},
	"internal/thick/server.go":        {"acceptedKey", "peerKey", "connKey"},
}

// No non-test Go file of the repository calls context.WithValue but with
// a key contextValuesAllowed lists for that file.
func TestNoOptionTravelsInAContext(t *testing.T) {
	for _, dir := range goDirs(t) {
		matches, err := filepath.Glob(filepath.Join(dir, "*.go"))
		if err != nil {
			t.Fatal(err)
		}
		for _, path := range matches {
			if strings.HasSuffix(path, "_test.go") {
				continue
			}
			for _, use := range contextValueUses(t, path) {
				if !slices.Contains(contextValuesAllowed[filepath.ToSlash(path)], use.key) {
					t.Errorf("%s: context.WithValue with key %q: pass the option as a value (a parameter, an options struct, a field of the operation), not in the context; allowed: %v",
						use.pos, use.key, contextValuesAllowed)
				}
			}
		}
	}
}

// contextValueUse is one mention of context.WithValue: where, and the
// type of the key it is called with ("" when it is not called with a
// composite literal of a named type).
type contextValueUse struct {
	pos token.Position
	key string
}

// contextValueUses returns every mention of context.WithValue in the Go
// file at path, whatever name the file imports package context under.
func contextValueUses(t *testing.T, path string) []contextValueUse {
	t.Helper()
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
	if err != nil {
		t.Fatal(err)
	}
	pkgName := ""
	for _, imp := range f.Imports {
		if p, _ := strconv.Unquote(imp.Path.Value); p == "context" {
			pkgName = "context"
			if imp.Name != nil {
				pkgName = imp.Name.Name
			}
		}
	}
	if pkgName == "" {
		return nil
	}
	isWithValue := func(e ast.Expr) bool {
		sel, ok := e.(*ast.SelectorExpr)
		if !ok || sel.Sel.Name != "WithValue" {
			return false
		}
		id, ok := sel.X.(*ast.Ident)
		return ok && id.Name == pkgName
	}
	var uses []contextValueUse
	called := map[ast.Expr]bool{}
	ast.Inspect(f, func(n ast.Node) bool {
		switch n := n.(type) {
		case *ast.CallExpr:
			if isWithValue(n.Fun) {
				called[n.Fun] = true
				uses = append(uses, contextValueUse{pos: fset.Position(n.Pos()), key: keyType(n)})
			}
		case *ast.SelectorExpr:
			if isWithValue(n) && !called[n] { // a func value: its keys cannot be told
				uses = append(uses, contextValueUse{pos: fset.Position(n.Pos())})
			}
		}
		return true
	})
	return uses
}

// keyType is the type name of a WithValue call's key when it is a
// composite literal (key{}), else "".
func keyType(call *ast.CallExpr) string {
	if len(call.Args) != 3 {
		return ""
	}
	lit, ok := call.Args[1].(*ast.CompositeLit)
	if !ok {
		return ""
	}
	if id, ok := lit.Type.(*ast.Ident); ok {
		return id.Name
	}
	return ""
}
