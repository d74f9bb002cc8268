package layering

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// edges are the packages (and their subtrees) that may serve HTTP: declare a handler (a
// function of an http.ResponseWriter and an *http.Request) or route with net/http's
// ServeMux. Every REST route lives under internal/control/api; each other entry says why it serves.
var edges = []struct{ dir, why string }{
	{"internal/control/api", "the REST routes: one table per tree, served through httpx.Chain"},
	{"internal/httpx", "the one chain every listener serves through"},
	{"internal/control/console", "the console's pages (HTML, not REST), through the chain"},
	{"internal/control/proxy", "the door into sandboxes' ports, through the chain"},
	{"internal/control/server", "the listener: dispatch to the edges, forwarding between nodes and their routes"},
	{"internal/guest/envd", "the guest's own server, inside the sandbox"},
	{"internal/sandbox/egress", "the egress proxy of sandboxes' outbound traffic, not a route of Cove's"},
	{"internal/observe/telemetry", "OpenTelemetry's span middleware, not a route"},
}

// TestOnlyTheEdgesServeHTTP is the one-edge rule: a package outside the edges declares no
// HTTP handler and no mux, so a REST route cannot grow in a domain package (events, logs,
// sampler, trace, retention, cluster serve nothing; their routes are in internal/control/api).
// Test helpers (packages named *test) fake servers Cove does not own and are exempt.
func TestOnlyTheEdgesServeHTTP(t *testing.T) {
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range edges {
		if files, _ := filepath.Glob(filepath.Join(root, e.dir, "*.go")); len(files) == 0 {
			t.Errorf("no package %s: the exemption names nothing", e.dir)
		}
	}
	served := 0 // handlers found in the edges: the check sees handlers at all
	for _, top := range []string{"internal", "cmd"} {
		err := filepath.WalkDir(filepath.Join(root, top), func(path string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
				return err
			}
			rel, _ := filepath.Rel(root, path)
			dir := filepath.ToSlash(filepath.Dir(rel))
			found, err := servesHTTP(path, nil)
			if err != nil {
				return err
			}
			if len(found) == 0 {
				return nil
			}
			if isEdge(dir) {
				served += len(found)
				return nil
			}
			if strings.HasSuffix(filepath.Base(dir), "test") {
				return nil
			}
			for _, f := range found {
				t.Errorf("%s: %s; a REST route's handler belongs under internal/control/api (its domain package exposes the query it needs)", rel, f)
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	if served == 0 {
		t.Error("no handler found in any edge: the check sees nothing")
	}
}

func TestTheEdgeCheckFindsHandlersAndMuxes(t *testing.T) {
	for _, tt := range []struct {
		name, src string
		want      int
	}{
		{"a handler function is found", `package x
import "net/http"
func list(w http.ResponseWriter, r *http.Request) {}`, 1},
		{"a handler literal under another import name is found", `package x
import nh "net/http"
var h = nh.HandlerFunc(func(w nh.ResponseWriter, r *nh.Request) {})`, 1},
		{"a mux is found", `package x
import "net/http"
func routes() { m := http.NewServeMux(); _ = m }`, 1},
		{"an HTTP client is not a handler", `package x
import "net/http"
func get(c *http.Client, r *http.Request) (*http.Response, error) { return c.Do(r) }`, 0},
	} {
		t.Run(tt.name, func(t *testing.T) {
			found, err := servesHTTP("x.go", []byte(tt.src))
			if err != nil || len(found) != tt.want {
				t.Errorf("found %q, %v; want %d", found, err, tt.want)
			}
		})
	}
}

func isEdge(dir string) bool {
	return slices.ContainsFunc(edges, func(e struct{ dir, why string }) bool {
		return dir == e.dir || strings.HasPrefix(dir, e.dir+"/")
	})
}

// servesHTTP lists what in a file serves HTTP: handler signatures and ServeMux uses (src, or
// the file when src is nil).
func servesHTTP(path string, src []byte) ([]string, error) {
	fset := token.NewFileSet()
	var f *ast.File
	var err error
	if src != nil {
		f, err = parser.ParseFile(fset, path, src, 0)
	} else {
		f, err = parser.ParseFile(fset, path, nil, 0)
	}
	if err != nil {
		return nil, err
	}
	name := ""
	for _, imp := range f.Imports {
		if p, _ := strconv.Unquote(imp.Path.Value); p == "net/http" {
			name = "http"
			if imp.Name != nil {
				name = imp.Name.Name
			}
		}
	}
	if name == "" {
		return nil, nil
	}
	isHTTP := func(e ast.Expr, sel string) bool {
		s, ok := e.(*ast.SelectorExpr)
		if !ok {
			return false
		}
		x, ok := s.X.(*ast.Ident)
		return ok && x.Name == name && s.Sel.Name == sel
	}
	var found []string
	ast.Inspect(f, func(n ast.Node) bool {
		switch n := n.(type) {
		case *ast.SelectorExpr:
			for _, sel := range []string{"ServeMux", "NewServeMux", "Handle", "HandleFunc"} {
				if isHTTP(n, sel) {
					found = append(found, fmt.Sprintf("line %d uses http.%s", fset.Position(n.Pos()).Line, sel))
				}
			}
		case *ast.FuncType:
			var types []ast.Expr
			for _, p := range n.Params.List {
				for range max(1, len(p.Names)) {
					types = append(types, p.Type)
				}
			}
			for i := 0; i+1 < len(types); i++ {
				if star, ok := types[i+1].(*ast.StarExpr); ok && isHTTP(types[i], "ResponseWriter") && isHTTP(star.X, "Request") {
					found = append(found, fmt.Sprintf("line %d declares an HTTP handler", fset.Position(n.Pos()).Line))
					break
				}
			}
		}
		return true
	})
	return found, nil
}
