package server

import (
	"bufio"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/cove-dev/cove/internal/control/api"
	"github.com/cove-dev/cove/internal/covetest"
)

// sdkOperations reads every "METHOD /path" of the OpenAPI paths in the installed official
// npm e2b SDK's index.d.ts (scripts/deps.sh installs it into test/compat).
func sdkOperations(t *testing.T) []string {
	t.Helper()
	file := filepath.Join("..", "compat", "node_modules", "e2b", "dist", "index.d.ts")
	f, err := os.Open(file)
	if err != nil {
		t.Skipf("the official e2b SDK is not installed (%v): run ./scripts/deps.sh", err)
	}
	defer f.Close()
	pathLine := regexp.MustCompile(`^  "(/[^"]*)": \{$`)
	opLine := regexp.MustCompile(`^    (get|put|post|delete|patch|head|options): \{$`)
	var ops []string
	in, path := false, ""
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		switch {
		case line == "interface paths {":
			in = true
		case in && line == "}":
			in = false
		case in:
			if m := pathLine.FindStringSubmatch(line); m != nil {
				path = m[1]
			} else if m := opLine.FindStringSubmatch(line); m != nil && path != "" {
				ops = append(ops, strings.ToUpper(m[1])+" "+path)
			}
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	if len(ops) == 0 {
		t.Fatalf("no operations found in %s: has the SDK's layout changed?", file)
	}
	return ops
}

// TestEveryE2BOperationIsAnswered walks the installed SDK's paths against a real server:
// each operation is served or answers 501 naming it, never "no such route"; and the API's
// table of E2B operations (api.Operations) is the SDK's, neither more nor less.
func TestEveryE2BOperationIsAnswered(t *testing.T) {
	ops := sdkOperations(t)
	t.Run("the API's operation table is the SDK's", func(t *testing.T) {
		table := api.Operations()
		for _, op := range ops {
			if !slices.Contains(table, op) {
				t.Errorf("%s is in the SDK's paths but not in internal/control/api's e2bOperations", op)
			}
		}
		for _, op := range table {
			if !slices.Contains(ops, op) {
				t.Errorf("%s is in internal/control/api's e2bOperations but not in the SDK's paths", op)
			}
		}
	})
	s := covetest.Start(t, "")
	c := client{t: t, url: s.URL, key: s.Key}
	wildcard := regexp.MustCompile(`\{[^}]+\}`)
	implemented, unserved := 0, 0
	for _, op := range ops {
		method, path, _ := strings.Cut(op, " ")
		var body any
		if method != http.MethodGet && method != http.MethodDelete {
			body = map[string]any{}
		}
		code, out, _ := c.do(method, wildcard.ReplaceAllString(path, "inopewalk"), body)
		msg, _ := out["message"].(string)
		switch {
		case strings.Contains(msg, "no such route"):
			t.Errorf("%s: %d %q", op, code, msg)
		case code == http.StatusNotImplemented:
			if !strings.HasPrefix(msg, op+" is not implemented by this Cove server") {
				t.Errorf("%s: 501 with message %q, want it to name the operation", op, msg)
			}
			unserved++
		default:
			implemented++
		}
	}
	t.Logf("%d implemented, %d answered 501, 0 no-such-route (of %d operations in the SDK's paths)", implemented, unserved, len(ops))
}
