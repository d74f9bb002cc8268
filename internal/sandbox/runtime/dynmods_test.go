package runtime

import (
	"os"
	"slices"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

func TestCgroup2MountIsFoundWithWhatARemountMustKeep(t *testing.T) {
	const (
		hybrid = `24 23 0:21 / /sys/fs/cgroup ro,nosuid,nodev,noexec shared:9 - tmpfs tmpfs ro,mode=755
25 24 0:22 / /sys/fs/cgroup/unified rw,nosuid,nodev,noexec,relatime shared:10 - cgroup2 cgroup2 rw,nsdelegate
28 24 0:25 / /sys/fs/cgroup/memory rw,nosuid,nodev,noexec,relatime shared:13 - cgroup cgroup rw,memory
`
		unified = `30 1 0:26 / /sys/fs/cgroup rw,relatime shared:4 - cgroup2 cgroup2 rw,nsdelegate,memory_recursiveprot,favordynmods
`
		v1only = `28 24 0:25 / /sys/fs/cgroup/memory rw,nosuid,nodev,noexec,relatime shared:13 - cgroup cgroup rw,memory
`
		elsewhere = `40 1 0:30 / /mnt/cg rw,relatime - cgroup2 cgroup2 rw
`
	)
	tests := []struct {
		name, mountinfo string
		found           bool
		want            mountEntry
	}{
		{"a hybrid host's unified mount keeps its flags and nsdelegate", hybrid, true,
			mountEntry{"/sys/fs/cgroup/unified", unix.MS_NOSUID | unix.MS_NODEV | unix.MS_NOEXEC | unix.MS_RELATIME, []string{"nsdelegate"}}},
		{"a cgroup2 host's mount reports favordynmods already set", unified, true,
			mountEntry{"/sys/fs/cgroup", unix.MS_RELATIME, []string{"nsdelegate", "memory_recursiveprot", "favordynmods"}}},
		{"a v1-only host has none", v1only, false, mountEntry{}},
		{"a cgroup2 mount outside /sys/fs/cgroup is not the host's", elsewhere, false, mountEntry{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, found, err := cgroup2Mount(strings.NewReader(tt.mountinfo))
			if err != nil {
				t.Fatal(err)
			}
			if found != tt.found || got.point != tt.want.point || got.flags != tt.want.flags || !slices.Equal(got.superOpts, tt.want.superOpts) {
				t.Errorf("cgroup2Mount = %+v, %v; want %+v, %v", got, found, tt.want, tt.found)
			}
		})
	}
}

func TestFavorDynModsLeavesTheOptionOnAndTheOthersInPlace(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to remount the cgroup2 mount")
	}
	feats, _ := os.ReadFile(cgroupFeatures)
	if !slices.Contains(strings.Fields(string(feats)), "favordynmods") {
		t.Skip("this kernel has no favordynmods (Linux 6.0+)")
	}
	read := func() mountEntry {
		f, err := os.Open("/proc/self/mountinfo")
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		m, ok, err := cgroup2Mount(f)
		if err != nil || !ok {
			t.Skipf("no cgroup2 mount under %s (%v)", cgroupRoot, err)
		}
		return m
	}
	before := read()
	if i := slices.Index(before.superOpts, "favordynmods"); i >= 0 {
		// Off first, so that the remount path runs (on Linux 6.18 the lock it switched to
		// stays: this costs nothing).
		before.superOpts = slices.Delete(before.superOpts, i, i+1)
		if err := unix.Mount("", before.point, "", unix.MS_REMOUNT|before.flags, strings.Join(before.superOpts, ",")); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _, _ = FavorDynMods() })
		if m := read(); slices.Contains(m.superOpts, "favordynmods") {
			t.Fatalf("could not switch favordynmods off to test switching it on: %v", m.superOpts)
		}
	}
	on, err := FavorDynMods()
	if err != nil || !on {
		t.Fatalf("FavorDynMods = %v, %v; want true, nil", on, err)
	}
	after := read()
	if !slices.Contains(after.superOpts, "favordynmods") {
		t.Errorf("the cgroup2 mount's options are %v: no favordynmods", after.superOpts)
	}
	for _, o := range before.superOpts {
		if !slices.Contains(after.superOpts, o) {
			t.Errorf("option %s was lost: %v before, %v after", o, before.superOpts, after.superOpts)
		}
	}
	if after.flags != before.flags {
		t.Errorf("mount flags changed: %#x before, %#x after", before.flags, after.flags)
	}
}
