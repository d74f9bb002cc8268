package envd_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"golang.org/x/sys/unix"

	pb "github.com/cove-dev/cove/sdk/gen/process"
	"github.com/cove-dev/cove/sdk/gen/process/processconnect"
)

// TestEnvdOutlivesAnOOMKillOfItsCommand runs a subreaping envd in a 64 MiB memory cgroup
// where most of the memory is held by no process (a tmpfs file, as a sandbox's /tmp can be):
// a command that then allocates is OOM-killed, and envd, whose RSS is larger than the
// command's when the limit is hit, lives on because its commands' OOM scores are raised.
func TestEnvdOutlivesAnOOMKillOfItsCommand(t *testing.T) {
	if testing.Short() {
		t.Skip("envd: starts a child envd in a memory cgroup; skipped in -short")
	}
	if os.Geteuid() != 0 {
		t.Skip("needs root for a memory cgroup and a tmpfs")
	}
	const memcgRoot = "/sys/fs/cgroup/memory"
	if _, err := os.Stat(filepath.Join(memcgRoot, "memory.limit_in_bytes")); err != nil {
		t.Skip("needs the cgroup v1 memory controller at " + memcgRoot)
	}
	cg := filepath.Join(memcgRoot, fmt.Sprintf("cove-envd-oom-test-%d", os.Getpid()))
	if err := os.Mkdir(cg, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		for i := 0; i < 100; i++ { // the kernel frees an emptied cgroup asynchronously
			if err := unix.Rmdir(cg); err == nil || !errors.Is(err, unix.EBUSY) {
				return
			}
			time.Sleep(20 * time.Millisecond)
		}
	})
	if err := os.WriteFile(filepath.Join(cg, "memory.limit_in_bytes"), []byte(strconv.Itoa(64<<20)), 0); err != nil {
		t.Fatal(err)
	}
	shm := t.TempDir()
	if err := unix.Mount("tmpfs", shm, "tmpfs", 0, "size=128m"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = unix.Unmount(shm, unix.MNT_DETACH) }) // before the cgroup goes: its pages are charged there

	url, pid := startReapingEnvd(t) // its Cleanup kills it first, then the mount and cgroup go
	if err := os.WriteFile(filepath.Join(cg, "cgroup.procs"), []byte(strconv.Itoa(pid)), 0); err != nil {
		t.Fatal(err)
	}
	c := processconnect.NewProcessClient(http.DefaultClient, url)
	run := func(script string) result {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		stream, err := c.Start(ctx, connect.NewRequest(bash(script)))
		if err != nil {
			t.Fatal(err)
		}
		return collect[*pb.StartResponse](stream)
	}

	if r := run(fmt.Sprintf("head -c %d /dev/zero > %s/fill && echo filled", 48<<20, shm)); !strings.Contains(r.stdout, "filled") {
		t.Fatalf("filling the tmpfs: %+v", r)
	}
	r := run(`x=$(head -c 100000000 /dev/zero | tr "\0" a); echo survived`)
	if strings.Contains(r.stdout, "survived") || r.end.GetExited() || r.end.GetStatus() != "signal: killed" {
		t.Fatalf("the allocating command ended %+v, want killed by the OOM killer", r.end)
	}
	oom, _ := os.ReadFile(filepath.Join(cg, "memory.oom_control"))
	if !strings.Contains(string(oom), "oom_kill ") || strings.Contains(string(oom), "oom_kill 0") {
		t.Errorf("the cgroup counts no OOM kill:\n%s", oom)
	}
	if err := unix.Kill(pid, 0); err != nil {
		t.Fatalf("envd is gone after its command's OOM kill: %v", err)
	}
	if r := run("echo alive"); r.stdout != "alive\n" {
		t.Errorf("a command after the OOM kill: %+v", r)
	}
}
