package runtime

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strings"
	"time"
)

// Host is what this machine offers for running sandboxes with the runc driver, so that tests,
// `cove server` and operators can say exactly why sandboxes cannot run here.
type Host struct {
	Root        bool            // running as uid 0
	Runc        string          // path of the runc binary; "" when not found
	RuncVersion string          // first line of `runc --version`
	Seccomp     bool            // runc was built with libseccomp
	CgroupV1    map[string]bool // v1 controllers mounted at /sys/fs/cgroup/<name>
	Overlay     bool            // the kernel knows overlayfs
}

// cgroupControllers are the v1 controllers the runc driver needs: limits, accounting, freezing.
var cgroupControllers = []string{"memory", "cpu", "cpuacct", "pids", "freezer"}

// Detect inspects the machine. runcPath may be "" to look runc up in PATH.
func Detect(ctx context.Context, runcPath string) Host {
	h := Host{Root: os.Geteuid() == 0, CgroupV1: map[string]bool{}}
	if runcPath == "" {
		runcPath = "runc"
	}
	if p, err := exec.LookPath(runcPath); err == nil {
		h.Runc = p
		ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		if out, err := exec.CommandContext(ctx, p, "--version").Output(); err == nil {
			lines := strings.Split(strings.TrimSpace(string(out)), "\n")
			h.RuncVersion = lines[0]
			h.Seccomp = strings.Contains(string(out), "libseccomp:")
		}
	}
	for _, c := range cgroupControllers {
		h.CgroupV1[c] = cgroupV1Mounted(c)
	}
	h.Overlay = filesystemKnown("overlay")
	return h
}

// Err names everything missing for the runc driver, or returns nil when sandboxes can run.
func (h Host) Err() error {
	var errs []error
	if !h.Root {
		errs = append(errs, errors.New("not running as root"))
	}
	if h.Runc == "" {
		errs = append(errs, errors.New("runc not found in PATH (Debian package runc)"))
	}
	var missing []string
	for _, c := range cgroupControllers {
		if !h.CgroupV1[c] {
			missing = append(missing, c)
		}
	}
	if len(missing) > 0 {
		errs = append(errs, fmt.Errorf("cgroup v1 controllers not mounted under /sys/fs/cgroup: %s", strings.Join(missing, ", ")))
	}
	if !h.Overlay {
		errs = append(errs, errors.New("kernel lacks overlayfs"))
	}
	return errors.Join(errs...)
}

func cgroupV1Mounted(controller string) bool {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return false
	}
	defer f.Close()
	found := false
	_ = eachMount(f, func(m mountLine) bool {
		found = m.fsType == "cgroup" && m.point == cgroupRoot+"/"+controller && slices.Contains(strings.Split(m.superOpts, ","), controller)
		return !found
	})
	return found
}

func filesystemKnown(fs string) bool {
	b, err := os.ReadFile("/proc/filesystems")
	if err != nil {
		return false
	}
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) > 0 && f[len(f)-1] == fs {
			return true
		}
	}
	return false
}
