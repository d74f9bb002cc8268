package runtime

import (
	"crypto/rand"
	"encoding/hex"
	"os"
	"path/filepath"
	goruntime "runtime"
	"strconv"
	"strings"
	"testing"
)

func TestTheSandboxesParentWeighsOneTaskPerCPU(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root for a cgroup")
	}
	if _, err := os.Stat(filepath.Join(cgroupRoot, "cpu", "cpu.shares")); err != nil {
		t.Skip("needs the cgroup v1 cpu controller")
	}
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	tests := []struct {
		name       string
		set        string // what the parent holds first; "" for a parent that does not exist
		wantShares int
	}{
		{"a new parent gets 1024 per CPU", "", kernelShares * goruntime.NumCPU()},
		{"a parent at the kernel's 1024 gets 1024 per CPU", "1024", kernelShares * goruntime.NumCPU()},
		{"a parent an operator weighed keeps its weight", "300", 300},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			parent := "/cove-test-shares-" + hex.EncodeToString(b) + strconv.Itoa(i)
			dir := filepath.Join(cgroupRoot, "cpu", parent)
			t.Cleanup(func() { _ = os.Remove(dir) })
			if tt.set != "" {
				if err := os.Mkdir(dir, 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(filepath.Join(dir, "cpu.shares"), []byte(tt.set), 0); err != nil {
					t.Fatal(err)
				}
			}
			if err := weighParent(parent); err != nil {
				t.Fatal(err)
			}
			got, _ := os.ReadFile(filepath.Join(dir, "cpu.shares"))
			if strings.TrimSpace(string(got)) != strconv.Itoa(tt.wantShares) {
				t.Errorf("cpu.shares = %s, want %d", got, tt.wantShares)
			}
		})
	}
}
