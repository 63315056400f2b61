package v1alpha1_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"strings"
	"testing"
)

// TestReasonsAreDocumented: a reason is part of the API, so each exported
// Reason constant of both API packages says, in its own doc comment, when
// it is given.
func TestReasonsAreDocumented(t *testing.T) {
	n := 0
	for _, dir := range []string{".", "../manifestlock/v1alpha1"} {
		fset := token.NewFileSet()
		pkgs, err := parser.ParseDir(fset, dir, func(fi fs.FileInfo) bool { return !strings.HasSuffix(fi.Name(), "_test.go") }, parser.ParseComments)
		if err != nil {
			t.Fatal(err)
		}
		for _, pkg := range pkgs {
			for _, f := range pkg.Files {
				for _, decl := range f.Decls {
					gd, ok := decl.(*ast.GenDecl)
					if !ok || gd.Tok != token.CONST {
						continue
					}
					for _, spec := range gd.Specs {
						vs := spec.(*ast.ValueSpec)
						for _, name := range vs.Names {
							if !name.IsExported() || !strings.HasPrefix(name.Name, "Reason") {
								continue
							}
							n++
							if vs.Doc == nil || !strings.HasPrefix(vs.Doc.Text(), name.Name+":") {
								t.Errorf("%s: %s has no doc comment of its own, starting %q", fset.Position(name.Pos()), name.Name, name.Name+":")
							}
						}
					}
				}
			}
		}
	}
	if n < 30 {
		t.Errorf("found %d Reason constants; the test reads the wrong files", n)
	}
}
