package process

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"
)

// holding starts a shell that holds about mb MiB in memory until the test ends, and waits
// until it does.
func holding(t *testing.T, mb int) int {
	t.Helper()
	cmd := exec.Command("sh", "-c", `x=$(head -c `+strconv.Itoa(mb<<20)+` /dev/zero | tr '\0' a); echo held > "$0"; sleep 60`, filepath.Join(t.TempDir(), "held"))
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	held := cmd.Args[3]
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if _, err := os.Stat(held); err == nil {
			return cmd.Process.Pid
		}
		if time.Now().After(deadline) {
			t.Fatalf("the shell holding %d MiB did not get there", mb)
		}
	}
}

func setAdj(t *testing.T, pid int, adj int) {
	t.Helper()
	if err := os.WriteFile("/proc/"+strconv.Itoa(pid)+"/oom_score_adj", []byte(strconv.Itoa(adj)), 0); err != nil {
		t.Skipf("cannot set oom_score_adj %d: %v", adj, err)
	}
}

func TestGuestOOMKillerChoosesAsTheKernelDoes(t *testing.T) {
	big, small := holding(t, 48), holding(t, 4)
	buf := make([]byte, 8192)
	for _, tc := range []struct {
		name             string
		limit            uint64
		bigAdj, smallAdj int
		want             int
	}{
		{"the process holding the most memory goes first", 1 << 30, 0, 0, big},
		{"a command at 1000 (as envd starts them) goes before a larger process at 0", 256 << 20, 0, 1000, small},
	} {
		t.Run(tc.name, func(t *testing.T) {
			setAdj(t, big, tc.bigAdj)
			setAdj(t, small, tc.smallAdj)
			v, ok := chooseVictim("/proc", []int{small, big, 1 << 30 /* gone */}, tc.limit, buf)
			if !ok || v.pid != tc.want {
				t.Fatalf("victim %+v (found %v), want pid %d (big %d, small %d)", v, ok, tc.want, big, small)
			}
			if v.comm != "sh" || v.rss == 0 {
				t.Errorf("victim %+v: want its command sh and its resident bytes", v)
			}
		})
	}
}

// TestGuestOOMKillerSkipsTheExempt reads a procfs tree written here: setting -1000 needs
// CAP_SYS_RESOURCE, which this machine class's root lacks.
func TestGuestOOMKillerSkipsTheExempt(t *testing.T) {
	proc := t.TempDir()
	write := func(pid int, statm, adj string) {
		dir := filepath.Join(proc, strconv.Itoa(pid))
		if err := os.MkdirAll(dir, 0o700); err != nil {
			t.Fatal(err)
		}
		for name, v := range map[string]string{"statm": statm, "oom_score_adj": adj, "comm": "p" + strconv.Itoa(pid) + "\n"} {
			if err := os.WriteFile(filepath.Join(dir, name), []byte(v), 0o600); err != nil {
				t.Fatal(err)
			}
		}
	}
	write(10, "90000 80000 100 1 0 1000 0\n", "-1000\n") // the largest, exempt
	write(11, "9000 8000 100 1 0 1000 0\n", "0\n")
	write(12, "0 0 0 0 0 0 0\n", "1000\n") // a zombie: holds nothing
	buf := make([]byte, 4096)
	if v, ok := chooseVictim(proc, []int{10, 11, 12}, 1<<30, buf); !ok || v.pid != 11 || v.comm != "p11" || v.rss != 8000*uint64(os.Getpagesize()) {
		t.Fatalf("victim %+v (found %v), want pid 11 with its 8000 resident pages", v, ok)
	}
	if v, ok := chooseVictim(proc, []int{10, 12}, 1<<30, buf); ok {
		t.Fatalf("chose %+v among an exempt process and a zombie", v)
	}
}

func TestAnonBytesReadsAnonPages(t *testing.T) {
	f := filepath.Join(t.TempDir(), "meminfo")
	if err := os.WriteFile(f, []byte("MemTotal:          65536 kB\nCached:             1872 kB\nAnonPages:           484 kB\nMapped:             1872 kB\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 4096)
	if n, err := anonBytes(f, buf); err != nil || n != 484<<10 {
		t.Errorf("anonBytes = %d, %v; want %d", n, err, 484<<10)
	}
	if n, err := anonBytes("/proc/meminfo", buf); err != nil || n == 0 {
		t.Errorf("this host's /proc/meminfo: %d, %v", n, err)
	}
	if err := os.WriteFile(f, []byte("MemTotal: 1 kB\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := anonBytes(f, buf); err == nil {
		t.Error("a meminfo without AnonPages read without error")
	}
}

func TestGuestOOMPollsFasterNearTheLimit(t *testing.T) {
	for _, tc := range []struct {
		name        string
		limit, used uint64
		want        time.Duration
	}{
		{"far from a large limit: four times a second", 8 << 30, 1 << 20, guestPollMax},
		{"half of 512 MiB left: the time 2 GiB/s needs for it", 512 << 20, 256 << 20, 125 * time.Millisecond},
		{"1 MiB left: the floor", 512 << 20, 511 << 20, guestPollMin},
		{"past the limit with nothing killed: slowly", 512 << 20, 600 << 20, guestPollMax},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := pollInterval(tc.limit, tc.used); got != tc.want {
				t.Errorf("pollInterval(%d, %d) = %s, want %s", tc.limit, tc.used, got, tc.want)
			}
		})
	}
}

func TestGuestOOMKillerIsOffOutsideGVisor(t *testing.T) {
	// This host's kernel counts OOM kills in its memory cgroups: envd is no OOM killer here,
	// as under runc.
	if _, err := sandboxCgroup().OOMKills("", nil); err != nil {
		t.Skipf("this host's root cgroup keeps no OOM kill count: %v", err)
	}
	if limit, ok := guestOOMLimit(); ok {
		t.Fatalf("guestOOMLimit = %d, true on a kernel with an OOM killer", limit)
	}
}
