package dispatcher_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"strings"
	"testing"
)

// maxFuncLines is issue 30's bound: every function of the dispatcher, from
// its signature to its closing brace, is shorter than this, so it reads in
// one screen.
const maxFuncLines = 60

// TestFunctionsFitOneScreen keeps the dispatcher's functions (its core's
// included) under maxFuncLines lines.
func TestFunctionsFitOneScreen(t *testing.T) {
	for _, dir := range []string{".", "internal/sched", "signature", "ssrf"} {
		files, err := filepath.Glob(filepath.Join(dir, "*.go"))
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range files {
			if strings.HasSuffix(f, "_test.go") {
				continue
			}
			checkFuncLengths(t, f)
		}
	}
}

func checkFuncLengths(t *testing.T, file string) {
	fset := token.NewFileSet()
	af, err := parser.ParseFile(fset, file, nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range af.Decls {
		fd, ok := d.(*ast.FuncDecl)
		if !ok || fd.Body == nil {
			continue
		}
		if n := fset.Position(fd.End()).Line - fset.Position(fd.Pos()).Line + 1; n >= maxFuncLines {
			t.Errorf("%s: %s is %d lines; split it below %d", file, fd.Name.Name, n, maxFuncLines)
		}
	}
}
