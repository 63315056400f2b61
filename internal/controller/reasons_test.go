package controller

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"sort"
	"strconv"
	"strings"
	"testing"
)

// The reasons of conditions, of status.notLocked and of events are part of
// the API: users' alerts match them. They are declared, documented, in
// api/v1alpha1 and api/manifestlock/v1alpha1, and the controller emits
// only those constants. TestReasonsAreTheAPIs holds it to that.
//
// It reads the source with go/ast rather than go/types: type-checking
// client-go from source would cost more than every other test here, and
// the syntax is enough. A reason position is
//   - the value of a field named Reason (or reason) in a composite literal:
//     metav1.Condition, v1alpha1.ObjectProblem, storage.Decision, ...;
//   - what is assigned to a variable named reason or to a .Reason field;
//   - the argument of a parameter named reason of any function of the
//     packages read (condition, openStatus, manifestError, hold, ...), and
//     the reason argument of record.EventRecorder's Event, Eventf and
//     AnnotatedEventf.
//
// In a reason position, a string literal fails, and so does a constant of
// the packages read other than an event's (named Event...): a new reason
// has to be declared in api/, where TestReasonsAreDocumented asks for its
// comment. What is left is a constant of api/, which the compiler checks,
// or a value carried from one (a variable, a field). Two more rules close
// the gaps: a constant of the packages read may not repeat an API reason's
// value (an event that shares a condition's reason uses its constant), and
// each of the engine's Failure reasons, which reach the status as they are,
// must be one the API lists.

// reasonPackages are the packages that set reasons, from this directory.
var reasonPackages = []string{".", "../storage", "../declare", "../twoway"}

// recorderReasons are the indexes of the reason of record.EventRecorder's
// methods.
var recorderReasons = map[string]int{"Event": 2, "Eventf": 2, "AnnotatedEventf": 3}

func TestReasonsAreTheAPIs(t *testing.T) {
	api := map[string]string{} // value → constant
	for _, dir := range []string{"../../api/v1alpha1", "../../api/manifestlock/v1alpha1"} {
		for name, value := range stringConsts(parseDir(t, token.NewFileSet(), dir)) {
			if strings.HasPrefix(name, "Reason") && value != "" {
				api[value] = name
			}
		}
	}
	if len(api) < 30 {
		t.Fatalf("found %d reasons in api/; the test reads the wrong files", len(api))
	}

	fset := token.NewFileSet()
	var files []*ast.File
	for _, dir := range reasonPackages {
		files = append(files, parseDir(t, fset, dir)...)
	}
	for _, p := range reasonProblems(fset, files, api) {
		t.Error(p)
	}

	for name, value := range stringConsts(parseDir(t, token.NewFileSet(), "../../engine")) {
		if strings.HasPrefix(name, "Reason") && api[value] == "" {
			t.Errorf("engine.%s (%q) reaches status.notLocked and Locked as it is, but api/ lists no such reason", name, value)
		}
	}
}

// TestReasonProblemsFound: the checker finds each kind of reason it is
// there to find, and nothing else.
func TestReasonProblemsFound(t *testing.T) {
	const src = `package p

const (
	EventThing = "Thing"
	localReason = "Local"
	EventShared = "Shared"
)

func condition(typ string, status bool, reason, message string) {}

func f(rec recorder, api string) {
	condition("Ready", true, "Literal", "message")  // 1
	condition("Ready", true, api, "message")
	condition("Ready", true, localReason, "message") // 2
	_ = metav1.Condition{Type: "Ready", Reason: "Literal"} // 3
	_ = metav1.Condition{Type: "Ready", Reason: v1alpha1.ReasonLocked}
	reason := "Literal" // 4
	reason = api
	var x struct{ Reason string }
	x.Reason = "Lit" + api // 5
	rec.Event(nil, "Warning", EventThing, "a message")
	rec.Eventf(nil, "Warning", "Literal", "a message %s", api) // 6
}
`
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, "p.go", src, parser.ParseComments)
	if err != nil {
		t.Fatal(err)
	}
	got := reasonProblems(fset, []*ast.File{f}, map[string]string{"Shared": "ReasonShared"})
	if len(got) != 7 { // the 6 marked, and EventShared
		t.Errorf("found %d problems, want 7:\n%s", len(got), strings.Join(got, "\n"))
	}
}

// reasonProblems returns what in files sets a reason other than an API
// constant (see TestReasonsAreTheAPIs); api maps the API's reason values
// to their constants.
func reasonProblems(fset *token.FileSet, files []*ast.File, api map[string]string) []string {
	var problems []string
	consts := map[string]string{} // package-level constants: name → literal value
	params := map[string][]int{}  // function name → indexes of parameters named reason
	for _, f := range files {
		for name, value := range stringConstsOf(f) {
			consts[name] = value
			if c := api[value]; c != "" && value != "" {
				problems = append(problems, fset.Position(f.Pos()).Filename+": constant "+name+" repeats the API's "+c+"; use it")
			}
		}
		for _, decl := range f.Decls {
			fd, ok := decl.(*ast.FuncDecl)
			if !ok {
				continue
			}
			i := 0
			for _, field := range fd.Type.Params.List {
				for _, name := range field.Names {
					if strings.EqualFold(name.Name, "reason") {
						params[fd.Name.Name] = append(params[fd.Name.Name], i)
					}
					i++
				}
				if len(field.Names) == 0 {
					i++
				}
			}
		}
	}

	var visit func(n ast.Node) bool
	visit = func(n ast.Node) bool {
		switch n := n.(type) {
		case *ast.BasicLit:
			if n.Kind == token.STRING {
				problems = append(problems, fset.Position(n.Pos()).String()+": reason "+n.Value+" is a literal; declare it in api/")
			}
		case *ast.SelectorExpr:
			// pkg.Name or x.Field: only x may name a constant of
			// the packages read.
			ast.Inspect(n.X, visit)
			return false
		case *ast.Ident:
			if value, ok := consts[n.Name]; ok && value != "" && !strings.HasPrefix(n.Name, "Event") {
				problems = append(problems, fset.Position(n.Pos()).String()+": reason "+n.Name+" is a constant of the controller; declare it in api/")
			}
		}
		return true
	}
	check := func(e ast.Expr) { ast.Inspect(e, visit) }
	isReason := func(e ast.Expr) bool {
		switch e := e.(type) {
		case *ast.Ident:
			return strings.EqualFold(e.Name, "reason")
		case *ast.SelectorExpr:
			return e.Sel.Name == "Reason"
		}
		return false
	}

	for _, f := range files {
		ast.Inspect(f, func(n ast.Node) bool {
			switch n := n.(type) {
			case *ast.CompositeLit:
				for _, elt := range n.Elts {
					if kv, ok := elt.(*ast.KeyValueExpr); ok && isReason(kv.Key) {
						check(kv.Value)
					}
				}
			case *ast.AssignStmt:
				for i, lhs := range n.Lhs {
					if isReason(lhs) && len(n.Rhs) == len(n.Lhs) {
						check(n.Rhs[i])
					}
				}
			case *ast.ValueSpec:
				for i, name := range n.Names {
					if isReason(name) && i < len(n.Values) {
						check(n.Values[i])
					}
				}
			case *ast.CallExpr:
				var name string
				switch fn := n.Fun.(type) {
				case *ast.Ident:
					name = fn.Name
				case *ast.SelectorExpr:
					name = fn.Sel.Name
				}
				indexes := params[name]
				if i, ok := recorderReasons[name]; ok {
					indexes = append(indexes, i)
				}
				for _, i := range indexes {
					if i < len(n.Args) {
						check(n.Args[i])
					}
				}
			}
			return true
		})
	}
	sort.Strings(problems)
	return problems
}

// parseDir parses the Go files of dir but its tests.
func parseDir(t *testing.T, fset *token.FileSet, dir string) []*ast.File {
	t.Helper()
	pkgs, err := parser.ParseDir(fset, dir, func(fi fs.FileInfo) bool { return !strings.HasSuffix(fi.Name(), "_test.go") }, 0)
	if err != nil {
		t.Fatal(err)
	}
	var files []*ast.File
	for _, pkg := range pkgs {
		for _, f := range pkg.Files {
			files = append(files, f)
		}
	}
	if len(files) == 0 {
		t.Fatalf("no Go files in %s", dir)
	}
	return files
}

// stringConsts returns the package-level constants of files, with their
// value if it is a string literal.
func stringConsts(files []*ast.File) map[string]string {
	out := map[string]string{}
	for _, f := range files {
		for name, value := range stringConstsOf(f) {
			out[name] = value
		}
	}
	return out
}

func stringConstsOf(f *ast.File) map[string]string {
	out := map[string]string{}
	for _, decl := range f.Decls {
		gd, ok := decl.(*ast.GenDecl)
		if !ok || gd.Tok != token.CONST {
			continue
		}
		for _, spec := range gd.Specs {
			vs := spec.(*ast.ValueSpec)
			for i, name := range vs.Names {
				out[name.Name] = ""
				if i < len(vs.Values) {
					if lit, ok := vs.Values[i].(*ast.BasicLit); ok && lit.Kind == token.STRING {
						out[name.Name], _ = strconv.Unquote(lit.Value)
					}
				}
			}
		}
	}
	return out
}
