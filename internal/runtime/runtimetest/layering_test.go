package runtimetest

import (
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

const module = "github.com/cove-dev/cove/"

// TestTheRuntimeLayerImportsNothingAboveIt walks the imports of the runtime and its test
// helpers: they sit below the template store, the orchestrator and the edges, and an arrow
// back up (runtimetest once imported template) makes a cycle waiting to happen.
func TestTheRuntimeLayerImportsNothingAboveIt(t *testing.T) {
	root, err := filepath.Abs("../../..")
	if err != nil {
		t.Fatal(err)
	}
	above := []string{"internal/template", "internal/orchestrator", "internal/api", "internal/proxy", "internal/server", "internal/store"}
	seen := map[string]bool{}
	var walk func(pkg, from string)
	walk = func(pkg, from string) {
		if seen[pkg] {
			return
		}
		seen[pkg] = true
		for _, a := range above {
			if pkg == a || strings.HasPrefix(pkg, a+"/") {
				t.Errorf("%s imports %s, a layer above the runtime", from, pkg)
				return
			}
		}
		files, _ := filepath.Glob(filepath.Join(root, pkg, "*.go"))
		for _, f := range files {
			if strings.HasSuffix(f, "_test.go") {
				continue
			}
			parsed, err := parser.ParseFile(token.NewFileSet(), f, nil, parser.ImportsOnly)
			if err != nil {
				t.Fatal(err)
			}
			for _, imp := range parsed.Imports {
				path, _ := strconv.Unquote(imp.Path.Value)
				if rel, ok := strings.CutPrefix(path, module); ok {
					walk(rel, pkg)
				}
			}
		}
	}
	if _, err := os.Stat(filepath.Join(root, "internal/runtime/runtimetest")); err != nil {
		t.Fatalf("module root not found from the test's directory: %v", err)
	}
	walk("internal/runtime/runtimetest", "")
	if !seen["internal/runtime"] {
		t.Error("the walk did not reach internal/runtime: it reads nothing")
	}
}
