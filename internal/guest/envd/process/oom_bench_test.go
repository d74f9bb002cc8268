package process

import "testing"

// BenchmarkOOMKills times the read of the sandbox's OOM kill count that envd, as a
// sandbox's init, makes before each start (on the host it reads the root memory cgroup's).
func BenchmarkOOMKills(b *testing.B) {
	for b.Loop() {
		oomKills()
	}
}
