package cgroup_test

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/cove-dev/cove/internal/sandbox/cgroup"
)

// tree writes files (path relative to root → content) under a new root.
func tree(t *testing.T, files map[string]string) string {
	t.Helper()
	root := t.TempDir()
	for name, body := range files {
		p := filepath.Join(root, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return root
}

func TestOneReaderForBothVersions(t *testing.T) {
	want := cgroup.Memory{Usage: 300 << 20, Limit: 512 << 20, MaxUsage: 400 << 20, FailCnt: 3, RSS: 200 << 20, Cache: 90 << 20, InactiveFile: 40 << 20, OOMKills: 2}
	for _, tt := range []struct {
		name  string
		files map[string]string
		v2    bool
		under bool
	}{
		{"cgroup v1: one hierarchy per controller", map[string]string{
			"memory/cove/sb/memory.usage_in_bytes":     "314572800\n",
			"memory/cove/sb/memory.limit_in_bytes":     "536870912\n",
			"memory/cove/sb/memory.max_usage_in_bytes": "419430400\n",
			"memory/cove/sb/memory.failcnt":            "3\n",
			"memory/cove/sb/memory.stat":               "cache 1\nrss 2\ntotal_cache 94371840\ntotal_rss 209715200\ntotal_inactive_file 41943040\n",
			"memory/cove/sb/memory.oom_control":        "oom_kill_disable 0\nunder_oom 1\noom_kill 2\n",
			"cpuacct/cove/sb/cpuacct.usage":            "1500000000\n",
			"pids/cove/sb/pids.current":                "7\n",
			"pids/cove/sb/pids.max":                    "64\n",
		}, false, true},
		{"cgroup v2: the unified hierarchy", map[string]string{
			"cgroup.controllers":     "cpu memory pids\n",
			"cove/sb/memory.current": "314572800\n",
			"cove/sb/memory.max":     "536870912\n",
			"cove/sb/memory.peak":    "419430400\n",
			"cove/sb/memory.stat":    "anon 209715200\nfile 94371840\nkernel 1\ninactive_file 41943040\nactive_file 5\n",
			"cove/sb/memory.events":  "low 0\nhigh 0\nmax 3\noom 2\noom_kill 2\noom_group_kill 0\n",
			"cove/sb/cpu.stat":       "usage_usec 1500000\nuser_usec 1000000\nsystem_usec 500000\n",
			"cove/sb/pids.current":   "7\n",
			"cove/sb/pids.max":       "64\n",
		}, true, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			fs := cgroup.Detect(tree(t, tt.files))
			if fs.V2 != tt.v2 {
				t.Fatalf("detected v2=%v", fs.V2)
			}
			m, err := fs.ReadMemory("cove/sb", nil)
			w := want
			w.UnderOOM = tt.under
			if err != nil || m != w {
				t.Errorf("memory %+v %v\nwant   %+v", m, err, w)
			}
			u, err := fs.ReadUsage("cove/sb", nil)
			if err != nil || u.Usage != w.Usage || u.Limit != w.Limit || u.RSS != w.RSS || u.Cache != w.Cache || u.InactiveFile != w.InactiveFile {
				t.Errorf("usage %+v %v", u, err)
			}
			if l, err := fs.ReadLimit("cove/sb", nil); err != nil || l != w.Limit {
				t.Errorf("limit %d %v", l, err)
			}
			if n, err := fs.OOMKills("cove/sb", nil); err != nil || n != 2 {
				t.Errorf("oom kills %d %v", n, err)
			}
			if cpu, err := fs.ReadCPU("cove/sb", nil); err != nil || cpu != 1500*time.Millisecond {
				t.Errorf("cpu %v %v", cpu, err)
			}
			if cur, lim, err := fs.ReadPIDs("cove/sb", nil); err != nil || cur != 7 || lim != 64 {
				t.Errorf("pids %d of %d %v", cur, lim, err)
			}
			if _, err := fs.ReadMemory("cove/gone", nil); !errors.Is(err, cgroup.ErrNotFound) {
				t.Errorf("a cgroup that is gone: %v", err)
			}
		})
	}
	t.Run("v2's max is no limit", func(t *testing.T) {
		fs := cgroup.Detect(tree(t, map[string]string{"cgroup.controllers": "", "sb/memory.current": "1\n", "sb/memory.max": "max\n", "sb/pids.current": "1\n", "sb/pids.max": "max\n"}))
		if m, _ := fs.ReadMemory("sb", nil); m.Limit != cgroup.Unlimited || m.Usage != 1 {
			t.Errorf("memory %+v", m)
		}
		if _, lim, err := fs.ReadPIDs("sb", nil); err != nil || lim != 0 {
			t.Errorf("pids limit %d %v, want 0 (none)", lim, err)
		}
	})
}

// TestThisHostsCgroups reads the machine's own root cgroup, whichever version it mounts.
func TestThisHostsCgroups(t *testing.T) {
	fs := cgroup.Detect("/sys/fs/cgroup")
	if _, err := os.Stat(fs.Root); err != nil {
		t.Skipf("no cgroup filesystem here: %v", err)
	}
	path := ""
	if !fs.V2 {
		// The root of a v1 memory hierarchy has no limit file on some kernels; the reader
		// reads the cgroup this test runs in.
		path = "/"
	}
	if cpu, err := fs.ReadCPU(path, nil); err != nil || cpu <= 0 {
		t.Errorf("cpu of this host's root cgroup (v2=%v): %v %v", fs.V2, cpu, err)
	}
	if m, err := fs.ReadMemory(path, nil); err != nil && !errors.Is(err, cgroup.ErrNotFound) || err == nil && m.Usage == 0 {
		t.Errorf("memory of this host's root cgroup (v2=%v): %+v %v", fs.V2, m, err)
	}
}
