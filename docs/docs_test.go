// Package docs holds Cove's documentation for people. Its test keeps the pages honest: every file
// or folder of the tree a page names, and every page it links to, exists.
package docs

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// roots are the top-level folders of the tree; a code span starting with one of them is a path.
var roots = []string{"internal/", "cmd/", "sdk/", "requestid/", "reason/", "test/", "bench/", "scripts/",
	"docs/", "deploy/", "examples/", "proto/", "gen/", "templates/", "sandbox/"}

var (
	codeSpan = regexp.MustCompile("`([^`\n]+)`")
	mdLink   = regexp.MustCompile(`\]\(([^)\s]+)\)`)
)

// namedPaths returns the tree paths a page's code spans name: `internal/x/y.go`,
// `internal/x/` or `internal/control/orchestrator/*_test.go`, each up to its first space.
func namedPaths(text string) []string {
	var paths []string
	for _, m := range codeSpan.FindAllStringSubmatch(text, -1) {
		span := m[1]
		if i := strings.IndexAny(span, " \t"); i >= 0 {
			span = span[:i]
		}
		if isSymbol(span) {
			continue
		}
		for _, r := range roots {
			if strings.HasPrefix(span, r) && !strings.ContainsAny(span, "<>{}$|") {
				paths = append(paths, span)
				break
			}
		}
	}
	return paths
}

// isSymbol tells `internal/observe/trace.Build` (a package's identifier) from a file's name.
func isSymbol(span string) bool {
	last := span[strings.LastIndex(span, "/")+1:]
	i := strings.LastIndex(last, ".")
	return i >= 0 && i+1 < len(last) && last[i+1] >= 'A' && last[i+1] <= 'Z'
}

func TestDocsNameFilesThatExist(t *testing.T) {
	repo, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	pages, err := filepath.Glob(filepath.Join(repo, "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	pages = append(pages, filepath.Join(repo, "README.md"))
	for _, page := range pages {
		rel, _ := filepath.Rel(repo, page)
		t.Run(rel, func(t *testing.T) {
			b, err := os.ReadFile(page)
			if err != nil {
				t.Fatal(err)
			}
			text := string(b)
			for _, p := range namedPaths(text) {
				matches, err := filepath.Glob(filepath.Join(repo, strings.TrimSuffix(p, "/")))
				if err != nil || len(matches) == 0 {
					t.Errorf("%s names %s, which does not exist", rel, p)
				}
			}
			for _, m := range mdLink.FindAllStringSubmatch(text, -1) {
				target := m[1]
				if strings.Contains(target, "://") || strings.HasPrefix(target, "#") || strings.HasPrefix(target, "mailto:") {
					continue
				}
				target, _, _ = strings.Cut(target, "#")
				if _, err := os.Stat(filepath.Join(filepath.Dir(page), target)); err != nil {
					t.Errorf("%s links to %s, which does not exist", rel, m[1])
				}
			}
		})
	}
}

func TestNamedPathsFindsPathsOnly(t *testing.T) {
	got := namedPaths("see `internal/control/orchestrator/lifecycle.go` and `cove server --x` and `internal/control/api/ (REST)` and `<data>/vault` and `internal/observe/trace.Build`")
	want := []string{"internal/control/orchestrator/lifecycle.go", "internal/control/api/"}
	if strings.Join(got, ",") != strings.Join(want, ",") {
		t.Fatalf("namedPaths = %q, want %q", got, want)
	}
}
