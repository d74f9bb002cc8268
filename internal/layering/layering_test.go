package layering

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

// rules are what each package's doc comment says it must not import.
var rules = []struct {
	pkg     string
	mustNot []string // package path prefixes, relative to the module
}{
	// The SDK is its own module: nothing in it reaches the product.
	{"sdk", []string{"internal/", "cmd/", "test/", "bench/", "templates"}},
	{"sdk/reason", []string{"internal/", "sdk"}},
	{"sdk/requestid", []string{"internal/", "sdk"}},
	{"sdk/envdapi", []string{"internal/", "sdk/buildctx"}},
	{"sdk/buildctx", []string{"internal/", "sdk"}},
	{"internal/errdefs", []string{"internal/telemetry", "internal/store", "internal/orchestrator", "internal/api", "internal/proxy", "internal/envd"}},
	{"internal/hostpkg", []string{"internal/"}},
	{"internal/authz", []string{"internal/", "sdk"}},
	{"internal/cgroup", []string{"internal/", "sdk"}},
	{"internal/telemetry", []string{"internal/store", "internal/orchestrator", "internal/api", "internal/proxy", "internal/envd", "internal/runtime", "internal/httpx"}},
	{"internal/httpx", []string{"internal/store", "internal/orchestrator", "internal/api", "internal/proxy", "internal/envd", "internal/authz"}},
	{"internal/runtime", []string{"internal/template", "internal/orchestrator", "internal/api", "internal/proxy", "internal/server", "internal/store", "internal/events"}},
	{"internal/runtime/runtimetest", []string{"internal/template", "internal/orchestrator", "internal/api", "internal/proxy", "internal/server", "internal/store"}},
	{"internal/store", []string{"internal/orchestrator", "internal/api", "internal/proxy", "internal/server", "internal/events", "internal/collect", "internal/runtime"}},
	{"internal/envd", []string{"internal/orchestrator", "internal/api", "internal/proxy", "internal/server", "internal/store", "internal/events", "internal/collect", "internal/runtime", "internal/template"}},
	{"internal/collect", []string{"internal/orchestrator", "internal/api", "internal/proxy", "internal/server", "internal/runtime"}},
	{"internal/api/teamroutes", []string{"internal/orchestrator", "internal/proxy", "internal/server", "internal/console"}},
	{"internal/events", []string{"internal/orchestrator", "internal/api", "internal/proxy", "internal/server", "internal/runtime"}},
	// The domain packages the team routes read know nothing of the edge.
	{"internal/logs", []string{"internal/api", "internal/proxy", "internal/server", "internal/console"}},
	{"internal/sampler", []string{"internal/api", "internal/proxy", "internal/server", "internal/console"}},
	{"internal/trace", []string{"internal/api", "internal/proxy", "internal/server", "internal/console"}},
	{"internal/template", []string{"internal/orchestrator", "internal/api", "internal/proxy", "internal/server", "internal/store/sqlite", "internal/store/postgres"}},
	{"internal/orchestrator", []string{"internal/api", "internal/proxy", "internal/server", "internal/console"}},
	{"internal/api", []string{"internal/server", "internal/proxy", "internal/console"}},
	{"internal/proxy", []string{"internal/server", "internal/api", "internal/console"}},
	{"internal/network", []string{"internal/orchestrator", "internal/api", "internal/proxy", "internal/server"}},
	// The egress policy and its user-space enforcers know sandboxes by address only: the
	// network's plumbing imports them, never the reverse.
	{"internal/egress", []string{"internal/network", "internal/runtime", "internal/store", "internal/orchestrator", "internal/api", "internal/proxy", "internal/server"}},
	{"internal/oidc", []string{"internal/orchestrator", "internal/network", "internal/egress", "internal/api", "internal/proxy", "internal/server"}},
}

func TestNoArrowRunsBackUp(t *testing.T) {
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(root, "go.mod")); err != nil {
		t.Fatalf("module root not found from the test's directory: %v", err)
	}
	for _, r := range rules {
		t.Run(r.pkg+" imports nothing it must not", func(t *testing.T) {
			if files, _ := filepath.Glob(filepath.Join(root, r.pkg, "*.go")); len(files) == 0 {
				t.Fatalf("no package %s: the rule checks nothing", r.pkg)
			}
			deps := imports(t, root, r.pkg)
			for dep, via := range deps {
				for _, bad := range r.mustNot {
					if dep == bad || strings.HasPrefix(dep, strings.TrimSuffix(bad, "/")+"/") {
						t.Errorf("%s imports %s (through %s)", r.pkg, dep, via)
					}
				}
			}
		})
	}
}

// imports returns the module's packages pkg imports, directly or not (not its tests), each
// with the package that imports it.
func imports(t *testing.T, root, pkg string) map[string]string {
	t.Helper()
	seen := map[string]string{}
	var walk func(p string)
	walk = func(p string) {
		files, _ := filepath.Glob(filepath.Join(root, p, "*.go"))
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
				rel, ok := strings.CutPrefix(path, module)
				if !ok || seen[rel] != "" {
					continue
				}
				seen[rel] = p
				walk(rel)
			}
		}
	}
	walk(pkg)
	return seen
}
