package main

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestNativeOnlyRunByMake: every test that skips under the race detector
// through nativeOnly (here and in learner/cluster) is named by a native
// pass of make test (a go test -run line without -race that lists its
// package), so that CI runs it.
func TestNativeOnlyRunByMake(t *testing.T) {
	root := filepath.Join("..", "..")
	mk, err := os.ReadFile(filepath.Join(root, "Makefile"))
	if err != nil {
		t.Fatal(err)
	}
	runs := map[string][]*regexp.Regexp{} // package folder → -run patterns of native passes
	line := regexp.MustCompile(`\$\(GO\) test -run '([^']+)' .*`)
	for _, l := range strings.Split(string(mk), "\n") {
		m := line.FindStringSubmatch(l)
		if m == nil || strings.Contains(l, "-race") {
			continue
		}
		re, err := regexp.Compile(strings.ReplaceAll(m[1], "$$", "$"))
		if err != nil {
			t.Fatalf("Makefile: -run %q: %v", m[1], err)
		}
		for _, f := range strings.Fields(l) {
			if strings.HasPrefix(f, "./") {
				runs[filepath.Clean(f)] = append(runs[filepath.Clean(f)], re)
			}
		}
	}
	found := 0
	for _, pkg := range []string{"tools/softsync", "learner/cluster"} {
		for _, name := range nativeOnlyTests(t, filepath.Join(root, pkg)) {
			found++
			ran := false
			for _, re := range runs[pkg] {
				ran = ran || re.MatchString(name)
			}
			if !ran {
				t.Errorf("%s: %s skips under the race detector, and no native pass of make test runs it", pkg, name)
			}
		}
	}
	if found == 0 {
		t.Error("no test calls nativeOnly: this test reads the sources wrongly")
	}
}

// nativeOnlyTests returns the tests of the package in dir whose bodies
// call nativeOnly.
func nativeOnlyTests(t *testing.T, dir string) []string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(dir, "*_test.go"))
	if err != nil || len(files) == 0 {
		t.Fatalf("%s: no test files: %v", dir, err)
	}
	var names []string
	fset := token.NewFileSet()
	for _, path := range files {
		f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range f.Decls {
			fn, ok := d.(*ast.FuncDecl)
			if !ok || fn.Body == nil || !strings.HasPrefix(fn.Name.Name, "Test") {
				continue
			}
			ast.Inspect(fn.Body, func(n ast.Node) bool {
				if c, ok := n.(*ast.CallExpr); ok {
					if id, ok := c.Fun.(*ast.Ident); ok && id.Name == "nativeOnly" {
						names = append(names, fn.Name.Name)
						return false
					}
				}
				return true
			})
		}
	}
	return names
}
