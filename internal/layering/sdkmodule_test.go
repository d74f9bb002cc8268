package layering

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestTheSDKModuleBringsNoServerCode builds the Go SDK's package list as a user who `go get`s
// it would (its own go.mod, no workspace): no package of the product and no module the SDK
// does not need (chromedp, the server's drivers) may be in it.
func TestTheSDKModuleBringsNoServerCode(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: runs the go tool")
	}
	gobin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go tool on PATH")
	}
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(gobin, "list", "-deps", "-f", "{{.ImportPath}} {{with .Module}}{{.Path}}{{end}}", "./...")
	cmd.Dir = filepath.Join(root, "sdk")
	cmd.Env = append(os.Environ(), "GOWORK=off", "GOFLAGS=-mod=mod")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("go list -deps in sdk/ (GOWORK=off): %v\n%s", err, out)
	}
	allowed := []string{"github.com/cove-dev/cove/sdk", "connectrpc.com/connect", "google.golang.org/protobuf"}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	for _, line := range lines {
		pkg, mod, _ := strings.Cut(line, " ")
		if mod == "" {
			continue // the standard library
		}
		ok := false
		for _, a := range allowed {
			ok = ok || mod == a
		}
		if !ok || strings.Contains(pkg, "/internal/") && strings.HasPrefix(pkg, "github.com/cove-dev/") {
			t.Errorf("the SDK module depends on %s (module %s)", pkg, mod)
		}
	}
	if len(lines) < 10 {
		t.Fatalf("go list -deps listed %d packages: the check saw nothing", len(lines))
	}
}
