package runtime

import (
	"os"
	"path/filepath"
	"testing"
)

func TestCriuLogErrorsNameTheErrorsOrWhereCRIUStopped(t *testing.T) {
	for _, c := range []struct{ name, log, want string }{
		{"errors, without the harmless rlimit one", "(00.01) Error (criu/util.c:1533): rlimit: Can't setup RLIMIT_NOFILE\n(00.02) Error (criu/mem.c:1): boom\n(00.03) done\n",
			" (criu: (00.02) Error (criu/mem.c:1): boom)"},
		{"killed on a timeout: the last line", "(00.13) Waiting for 24161 to trap\npie: 1: new_sp=0x7f\n\n",
			" (criu stopped at: pie: 1: new_sp=0x7f)"},
		{"an empty log", "", ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			f := filepath.Join(t.TempDir(), "dump.log")
			if err := os.WriteFile(f, []byte(c.log), 0o600); err != nil {
				t.Fatal(err)
			}
			if got := criuLogErrors(f); got != c.want {
				t.Errorf("criuLogErrors = %q, want %q", got, c.want)
			}
		})
	}
	if got := criuLogErrors(filepath.Join(t.TempDir(), "none")); got != "" {
		t.Errorf("no log: %q", got)
	}
}
