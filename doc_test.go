package cninet_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// maxPackageFiles is where a package becomes two (DESIGN.md, "Layout").
const maxPackageFiles = 30

// goDirs returns every directory of the repository holding Go files
// (bench/ and examples/ included), testdata and caches left out.
func goDirs(t *testing.T) []string {
	t.Helper()
	seen := map[string]bool{}
	var dirs []string
	err := filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && path != "." && (strings.HasPrefix(d.Name(), ".") || d.Name() == "testdata") {
			return filepath.SkipDir
		}
		if dir := filepath.Dir(path); !d.IsDir() && strings.HasSuffix(path, ".go") && !seen[dir] {
			seen[dir] = true
			dirs = append(dirs, dir)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return dirs
}

// goFiles returns the Go files of dir: the non-test ones, or, in a
// package of tests only, the tests.
func goFiles(t *testing.T, dir string) []string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var code, tests []string
	for _, e := range entries {
		switch name := e.Name(); {
		case e.IsDir() || !strings.HasSuffix(name, ".go"):
		case strings.HasSuffix(name, "_test.go"):
			tests = append(tests, name)
		default:
			code = append(code, name)
		}
	}
	if len(code) == 0 {
		return tests
	}
	return code
}

// Every package has a doc.go with a package comment, whose comments name
// each of the package's files, and no package outgrows maxPackageFiles
// files. (The root's file list is in a comment of its own, for its
// developers: its package comment is what go doc shows a user.)
func TestEveryPackageDocNamesEachOfItsFiles(t *testing.T) {
	for _, dir := range goDirs(t) {
		t.Run(dir, func(t *testing.T) {
			files := goFiles(t, dir)
			if n := len(files); n > maxPackageFiles && !strings.HasSuffix(files[0], "_test.go") {
				t.Errorf("%d non-test files; a package past %d files is two packages", n, maxPackageFiles)
			}
			f, err := parser.ParseFile(token.NewFileSet(), filepath.Join(dir, "doc.go"), nil, parser.ParseComments)
			if err != nil {
				t.Fatalf("no doc.go: %v", err)
			}
			if f.Doc == nil {
				t.Fatal("doc.go has no package comment")
			}
			var doc strings.Builder
			for _, c := range f.Comments {
				doc.WriteString(c.Text())
			}
			for _, name := range files {
				if name != "doc.go" && !strings.Contains(doc.String(), name) {
					t.Errorf("doc.go does not name %s", name)
				}
			}
		})
	}
}

// The root package's comment, the summary go doc shows first, fits one
// screen.
func TestTheRootPackageSummaryFitsOneScreen(t *testing.T) {
	const screen = 50 // lines
	f, err := parser.ParseFile(token.NewFileSet(), "doc.go", nil, parser.ParseComments|parser.PackageClauseOnly)
	if err != nil {
		t.Fatal(err)
	}
	if f.Doc == nil {
		t.Fatal("doc.go has no package comment")
	}
	if n := strings.Count(f.Doc.Text(), "\n"); n > screen {
		t.Errorf("the package comment has %d lines; go doc's summary should fit %d", n, screen)
	}
}

// Each of Configurator's methods has a doc comment a go doc reader can
// act on: a paragraph and bullets, the whole of the operation left to
// docs/design.md ("The operations").
func TestTheConfiguratorsMethodDocsAreAParagraphAndBullets(t *testing.T) {
	const maxLines = 25
	pkgs, err := parser.ParseDir(token.NewFileSet(), ".", func(fi fs.FileInfo) bool {
		return !strings.HasSuffix(fi.Name(), "_test.go")
	}, parser.ParseComments)
	if err != nil {
		t.Fatal(err)
	}
	methods := 0
	for _, pkg := range pkgs {
		for _, file := range pkg.Files {
			for _, decl := range file.Decls {
				fn, ok := decl.(*ast.FuncDecl)
				if !ok || fn.Recv == nil || !fn.Name.IsExported() {
					continue
				}
				if star, ok := fn.Recv.List[0].Type.(*ast.StarExpr); !ok || !isIdent(star.X, "Configurator") {
					continue
				}
				methods++
				if fn.Doc == nil {
					t.Errorf("Configurator.%s has no doc comment", fn.Name.Name)
				} else if n := strings.Count(fn.Doc.Text(), "\n"); n > maxLines {
					t.Errorf("Configurator.%s's doc comment has %d lines; cut it to a paragraph and bullets (at most %d) and move the rest to docs/design.md", fn.Name.Name, n, maxLines)
				}
			}
		}
	}
	if methods == 0 {
		t.Fatal("found no method of Configurator")
	}
}

func isIdent(e ast.Expr, name string) bool {
	id, ok := e.(*ast.Ident)
	return ok && id.Name == name
}

// The root package exports no alias of an internal type, and no value
// taken from an internal package: go doc shows a user everything it
// exports (the seams are package host's).
func TestTheRootPackageReexportsNothingInternal(t *testing.T) {
	pkgs, err := parser.ParseDir(token.NewFileSet(), ".", func(fi fs.FileInfo) bool {
		return !strings.HasSuffix(fi.Name(), "_test.go")
	}, 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, pkg := range pkgs {
		for name, file := range pkg.Files {
			internal := map[string]bool{} // import names of internal packages
			for _, imp := range file.Imports {
				path, _ := strconv.Unquote(imp.Path.Value)
				if strings.Contains(path, "/internal/") {
					local := filepath.Base(path)
					if imp.Name != nil {
						local = imp.Name.Name
					}
					internal[local] = true
				}
			}
			for _, decl := range file.Decls {
				gen, ok := decl.(*ast.GenDecl)
				if !ok {
					continue
				}
				for _, spec := range gen.Specs {
					var exported []*ast.Ident
					var from []ast.Expr
					switch s := spec.(type) {
					case *ast.TypeSpec:
						if s.Assign.IsValid() {
							exported, from = []*ast.Ident{s.Name}, []ast.Expr{s.Type}
						}
					case *ast.ValueSpec:
						exported, from = s.Names, append(s.Values, s.Type)
					}
					for _, id := range exported {
						if !id.IsExported() {
							continue
						}
						for _, e := range from {
							if e == nil {
								continue
							}
							ast.Inspect(e, func(n ast.Node) bool {
								if sel, ok := n.(*ast.SelectorExpr); ok {
									if x, ok := sel.X.(*ast.Ident); ok && internal[x.Name] {
										t.Errorf("%s: exported %s comes from internal package %s (%s.%s)", name, id.Name, x.Name, x.Name, sel.Sel.Name)
									}
								}
								return true
							})
						}
					}
				}
			}
		}
	}
}

// The root package's files use one another in one direction: no file
// uses a type, function, variable or constant of a file that doc.go
// lists above it (its list runs from the API down), so an operation
// never reaches back into the Configurator, nor a shared part into an
// operation.
func TestNoRootFileUsesANameOfAFileAboveIt(t *testing.T) {
	doc, err := os.ReadFile("doc.go")
	if err != nil {
		t.Fatal(err)
	}
	_, list, _ := strings.Cut(string(doc), "# Files")
	place := map[string]int{}
	for _, line := range strings.Split(list, "\n") {
		if name, _, ok := strings.Cut(strings.TrimPrefix(line, "\t"), " "); ok && strings.HasPrefix(line, "\t") && strings.HasSuffix(name, ".go") {
			place[name] = len(place)
		}
	}
	fset := token.NewFileSet()
	files := map[string]*ast.File{}
	declaredIn := map[string]string{} // a package-level name: its file
	for _, name := range goFiles(t, ".") {
		f, err := parser.ParseFile(fset, name, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		files[name] = f
		for _, obj := range f.Scope.Objects {
			declaredIn[obj.Name] = name
		}
		if _, ok := place[name]; !ok {
			t.Errorf("doc.go does not list %s in its file list", name)
		}
	}
	for name, f := range files {
		uses := map[string]bool{}
		for _, id := range f.Unresolved { // names of other files, and the universe's
			if in, ok := declaredIn[id.Name]; ok && !uses[id.Name] {
				uses[id.Name] = true
				if place[in] < place[name] {
					t.Errorf("%s uses %s of %s, which doc.go lists above it", name, id.Name, in)
				}
			}
		}
	}
}
