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
	{"internal/errdefs", []string{"internal/observe/telemetry", "internal/store", "internal/control/orchestrator", "internal/control/api", "internal/control/proxy", "internal/guest/envd"}},
	{"internal/builder/hostpkg", []string{"internal/"}},
	{"internal/control/authz", []string{"internal/", "sdk"}},
	{"internal/sandbox/cgroup", []string{"internal/", "sdk"}},
	{"internal/observe/telemetry", []string{"internal/store", "internal/control/orchestrator", "internal/control/api", "internal/control/proxy", "internal/guest/envd", "internal/sandbox/runtime", "internal/httpx"}},
	{"internal/httpx", []string{"internal/store", "internal/control/orchestrator", "internal/control/api", "internal/control/proxy", "internal/guest/envd", "internal/control/authz"}},
	{"internal/sandbox/runtime", []string{"internal/builder/template", "internal/control/orchestrator", "internal/control/api", "internal/control/proxy", "internal/control/server", "internal/store", "internal/observe/events"}},
	{"internal/sandbox/runtime/runtimetest", []string{"internal/builder/template", "internal/control/orchestrator", "internal/control/api", "internal/control/proxy", "internal/control/server", "internal/store"}},
	{"internal/store", []string{"internal/control/orchestrator", "internal/control/api", "internal/control/proxy", "internal/control/server", "internal/observe/events", "internal/observe/collect", "internal/sandbox/runtime"}},
	{"internal/guest/envd", []string{"internal/control/orchestrator", "internal/control/api", "internal/control/proxy", "internal/control/server", "internal/store", "internal/observe/events", "internal/observe/collect", "internal/sandbox/runtime", "internal/builder/template"}},
	{"internal/observe/collect", []string{"internal/control/orchestrator", "internal/control/api", "internal/control/proxy", "internal/control/server", "internal/sandbox/runtime"}},
	{"internal/control/api/teamroutes", []string{"internal/control/orchestrator", "internal/control/proxy", "internal/control/server", "internal/control/console"}},
	{"internal/observe/events", []string{"internal/control/orchestrator", "internal/control/api", "internal/control/proxy", "internal/control/server", "internal/sandbox/runtime"}},
	// The domain packages the team routes read know nothing of the edge.
	{"internal/observe/logs", []string{"internal/control/api", "internal/control/proxy", "internal/control/server", "internal/control/console"}},
	{"internal/observe/sampler", []string{"internal/control/api", "internal/control/proxy", "internal/control/server", "internal/control/console"}},
	{"internal/observe/trace", []string{"internal/control/api", "internal/control/proxy", "internal/control/server", "internal/control/console"}},
	// The builder imports the catalog, never the reverse.
	{"internal/builder/template", []string{"internal/builder/template/build", "internal/control/orchestrator", "internal/control/api", "internal/control/proxy", "internal/control/server", "internal/store/sqlite", "internal/store/postgres"}},
	{"internal/builder/template/build", []string{"internal/control/orchestrator", "internal/control/api", "internal/control/proxy", "internal/control/server", "internal/store/sqlite", "internal/store/postgres"}},
	// The volume and egress policy APIs and the orchestrator know each other through
	// interfaces the server hands them (volumes.Sandboxes, netpolicy.Sandboxes), never by import.
	{"internal/control/orchestrator", []string{"internal/control/api", "internal/control/proxy", "internal/control/server", "internal/control/console", "internal/control/volumes", "internal/control/netpolicy"}},
	{"internal/control/volumes", []string{"internal/control/orchestrator", "internal/control/api", "internal/control/proxy", "internal/control/server", "internal/control/console"}},
	{"internal/control/netpolicy", []string{"internal/control/orchestrator", "internal/control/api", "internal/control/proxy", "internal/control/server", "internal/control/console", "internal/sandbox/network"}},
	{"internal/control/api", []string{"internal/control/server", "internal/control/proxy", "internal/control/console"}},
	{"internal/control/proxy", []string{"internal/control/server", "internal/control/api", "internal/control/console"}},
	{"internal/sandbox/network", []string{"internal/control/orchestrator", "internal/control/api", "internal/control/proxy", "internal/control/server"}},
	// The egress policy and its user-space enforcers know sandboxes by address only: the
	// network's plumbing imports them, never the reverse.
	{"internal/sandbox/egress", []string{"internal/sandbox/network", "internal/sandbox/runtime", "internal/store", "internal/control/orchestrator", "internal/control/api", "internal/control/proxy", "internal/control/server"}},
	{"internal/control/oidc", []string{"internal/control/orchestrator", "internal/sandbox/network", "internal/sandbox/egress", "internal/control/api", "internal/control/proxy", "internal/control/server"}},
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
