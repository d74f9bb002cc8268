package covetest

import (
	"os"
	"path/filepath"
	"runtime"
	"testing"

	coveruntime "github.com/cove-dev/cove/internal/sandbox/runtime"
)

// RuntimeEnv is the variable that picks a server's engine (`cove server --runtime`'s
// default) and tells a test/compat scenario file which engine it runs against.
const RuntimeEnv = "COVE_RUNTIME"

// EachRuntime runs run once per engine, as the subtests "runc" and "runsc", with RuntimeEnv
// set to that engine: the servers the subtest starts run their sandboxes there, and the npm
// scenarios it runs read it. The runsc subtest skips, saying so, where the repository has not
// built bin/runsc.
func EachRuntime(t *testing.T, run func(t *testing.T, engine coveruntime.Engine)) {
	t.Helper()
	for _, e := range []coveruntime.Engine{coveruntime.EngineRunc, coveruntime.EngineRunsc} {
		t.Run(e.String(), func(t *testing.T) {
			if e == coveruntime.EngineRunsc {
				Runsc(t)
			}
			t.Setenv(RuntimeEnv, e.String())
			run(t, e)
		})
	}
}

// Runsc skips t where the repository has not built gVisor's runsc (bin/runsc), and otherwise
// puts bin/ first on PATH: the test servers' cove is built elsewhere, so it finds runsc there.
func Runsc(t testing.TB) {
	t.Helper()
	_, self, _, _ := runtime.Caller(0)
	bin := filepath.Join(filepath.Dir(self), "..", "..", "bin", "runsc")
	if _, err := os.Stat(bin); err != nil {
		t.Skipf("no bin/runsc (scripts/runsc.sh builds the pinned gVisor; make test does): %v", err)
	}
	t.Setenv("PATH", filepath.Dir(bin)+string(os.PathListSeparator)+os.Getenv("PATH"))
}
