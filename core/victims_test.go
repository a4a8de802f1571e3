package core

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestNoVictimDiscarded: every ledger call that can evict hands its
// victims to the core, which drops their names with them (locked). A
// victim discarded leaves its names listed, each answering ESTALE for
// good, for an object the ledger no longer holds: settleShort's SetSize
// did so (a store the disk refused half-way, on a 12 MiB store disk).
// The ledger's methods whose first result is []Victim are read from its
// source, and every call of one in core's must use that result.
func TestNoVictimDiscarded(t *testing.T) {
	evicting := map[string]bool{}
	for _, f := range parseDir(t, "../ledger") {
		for _, d := range f.Decls {
			fn, ok := d.(*ast.FuncDecl)
			if !ok || fn.Recv == nil || !fn.Name.IsExported() || fn.Type.Results == nil {
				continue
			}
			if r := fn.Type.Results.List[0].Type; strings.HasPrefix(exprString(r), "[]Victim") {
				evicting[fn.Name.Name] = true
			}
		}
	}
	if !evicting["SetSize"] || !evicting["Trim"] {
		t.Fatalf("the ledger's evicting methods read as %v: the scan is broken", evicting)
	}
	calls := 0
	for name, f := range parseDir(t, ".") {
		var stack []ast.Node
		ast.Inspect(f, func(n ast.Node) bool {
			if n == nil {
				stack = stack[:len(stack)-1]
				return true
			}
			defer func() { stack = append(stack, n) }()
			call, ok := n.(*ast.CallExpr)
			if !ok {
				return true
			}
			sel, ok := call.Fun.(*ast.SelectorExpr)
			if !ok || !evicting[sel.Sel.Name] || !strings.HasSuffix(exprString(sel.X), "ledger") {
				return true
			}
			calls++
			pos := token.Position{Filename: name, Line: fset.Position(call.Pos()).Line}
			switch p := stack[len(stack)-1].(type) {
			case *ast.ExprStmt:
				t.Errorf("%s: %s's victims are discarded (its result is not used)", pos, sel.Sel.Name)
			case *ast.AssignStmt:
				if len(p.Lhs) > 0 && exprString(p.Lhs[0]) == "_" {
					t.Errorf("%s: %s's victims are assigned to _", pos, sel.Sel.Name)
				}
			}
			return true
		})
	}
	if calls < 10 {
		t.Fatalf("found %d calls of the ledger's evicting methods in core: the scan is broken", calls)
	}
}

var fset = token.NewFileSet()

// parseDir parses the non-test Go files of dir, by file name.
func parseDir(t *testing.T, dir string) map[string]*ast.File {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	files := map[string]*ast.File{}
	for _, e := range entries {
		name := e.Name()
		if !strings.HasSuffix(name, ".go") || strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, filepath.Join(dir, name), nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		files[name] = f
	}
	return files
}

// exprString is the source-like text of a type or selector expression.
func exprString(e ast.Expr) string {
	switch e := e.(type) {
	case *ast.Ident:
		return e.Name
	case *ast.SelectorExpr:
		return exprString(e.X) + "." + e.Sel.Name
	case *ast.ArrayType:
		return "[]" + exprString(e.Elt)
	case *ast.IndexExpr:
		return exprString(e.X) + "[" + exprString(e.Index) + "]"
	case *ast.StarExpr:
		return "*" + exprString(e.X)
	}
	return ""
}
