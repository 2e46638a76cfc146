package nn

import (
	gobuild "go/build"
	"strings"
	"testing"
)

// TestDependencies keeps nn independent of the solver and the parameter
// server: a network describes its parameters with package param only.
func TestDependencies(t *testing.T) {
	const module = "github.com/softsync/softsync/"
	seen := map[string]bool{}
	var walk func(path, from string)
	walk = func(path, from string) {
		if seen[path] {
			return
		}
		seen[path] = true
		if path == module+"ps" || strings.HasPrefix(path, module+"ps/") && path != module+"ps/param" {
			t.Errorf("%s imports %s", from, path)
		}
		pkg, err := gobuild.Import(path, ".", 0)
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		for _, imp := range pkg.Imports {
			if strings.HasPrefix(imp, module) {
				walk(imp, path)
			}
		}
	}
	walk(module+"learner/nn", "")
}
