// Package kvm says whether this host could run a microVM runtime (Firecracker, Cloud
// Hypervisor) beside runc and runsc: a /dev/kvm that opens, answers API version 12, sits on a
// CPU that exposes hardware virtualization (vmx or svm), and boots a guest.
//
// The one idea: a /dev/kvm that exists is not a usable one. Some machines (PVM guests) have a
// /dev/kvm whose guests hang, so the last check is a real test boot of a few bytes of real-mode
// code, run in a child process with a time limit: a hang there cannot stall the caller. The
// binary that calls Detect must call ServeTestBoot first thing in main (TestMain in tests).
package kvm

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// apiVersion is the only KVM API version Linux has ever answered (KVM_GET_API_VERSION).
const apiVersion = 12

// bootTimeout bounds the test boot; a working KVM boots it in milliseconds.
const bootTimeout = 5 * time.Second

// childEnv, set in a child's environment, makes ServeTestBoot run the test boot and exit.
const childEnv = "COVE_KVM_TEST_BOOT"

// Report is what Detect found. Usable is true only when every check passed.
type Report struct {
	Usable bool
	// Reason says why KVM is not usable ("" when it is): the first check that failed.
	Reason string
	// Device is true when /dev/kvm opened for reading and writing.
	Device bool
	// APIVersion is what KVM_GET_API_VERSION answered (0 when not asked).
	APIVersion int
	// HardwareVirt is "vmx" or "svm" when /proc/cpuinfo lists it, else "".
	HardwareVirt string
	// TestBoot is true when the guest wrote 0x42 to port 0x10 and halted.
	TestBoot bool
}

// String is "usable" or "not here: <why>".
func (r Report) String() string {
	if r.Usable {
		return "usable"
	}
	return "not here: " + r.Reason
}

// Detect runs the checks in order, stopping at the first that fails: the device, its API
// version, the CPU's flags, and the test boot (only when all else passed, so that a machine
// without vmx or svm never runs a guest).
func Detect(ctx context.Context) Report {
	var r Report
	fd, err := unix.Open("/dev/kvm", unix.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		r.Reason = fmt.Sprintf("/dev/kvm: %v", err)
		return r
	}
	r.Device = true
	v, err := ioctl(fd, kvmGetAPIVersion, 0)
	unix.Close(fd)
	if err != nil {
		r.Reason = fmt.Sprintf("KVM_GET_API_VERSION: %v", err)
		return r
	}
	r.APIVersion = int(v)
	if r.APIVersion != apiVersion {
		r.Reason = fmt.Sprintf("KVM API version %d, want %d", r.APIVersion, apiVersion)
		return r
	}
	cpuinfo, err := os.ReadFile("/proc/cpuinfo")
	if err != nil {
		r.Reason = fmt.Sprintf("read /proc/cpuinfo: %v", err)
		return r
	}
	r.HardwareVirt = hardwareVirt(cpuinfo)
	if r.HardwareVirt == "" {
		r.Reason = "/proc/cpuinfo has no vmx or svm flag (the CPU does not expose hardware virtualization; a /dev/kvm here is paravirtual, e.g. PVM, where stock guest kernels hang)"
		return r
	}
	if err := runTestBoot(ctx, bootTimeout); err != nil {
		r.Reason = fmt.Sprintf("test boot: %v", err)
		return r
	}
	r.TestBoot = true
	r.Usable = true
	return r
}

// hardwareVirt returns "vmx" or "svm" when a flags line of cpuinfo lists it.
func hardwareVirt(cpuinfo []byte) string {
	sc := bufio.NewScanner(bytes.NewReader(cpuinfo))
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		key, val, ok := strings.Cut(sc.Text(), ":")
		if !ok || strings.TrimSpace(key) != "flags" {
			continue
		}
		for _, f := range strings.Fields(val) {
			if f == "vmx" || f == "svm" {
				return f
			}
		}
	}
	return ""
}

// runTestBoot boots the test guest in a child (this binary again, with childEnv set) and
// kills it when it has not answered within limit.
func runTestBoot(ctx context.Context, limit time.Duration) error {
	exe, err := os.Executable()
	if err != nil {
		return fmt.Errorf("find this binary: %w", err)
	}
	ctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	cmd := exec.CommandContext(ctx, exe)
	cmd.Env = append(os.Environ(), childEnv+"=1")
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err = cmd.Run()
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return fmt.Errorf("no answer within %s (the guest hung)", limit)
	}
	msg := strings.TrimSpace(out.String())
	if err != nil {
		if msg == "" {
			msg = err.Error()
		}
		return errors.New(msg)
	}
	if msg != bootOK {
		return fmt.Errorf("the child answered %q (does this binary call kvm.ServeTestBoot?)", msg)
	}
	return nil
}

// bootOK is what a child prints when the guest did what it should.
const bootOK = "kvm test boot: out 0x42 on port 0x10, then hlt"

// ServeTestBoot, in a child started by Detect, runs the test boot, prints the outcome and
// exits; anywhere else it returns at once. Call it first thing in main (or TestMain).
func ServeTestBoot() {
	if os.Getenv(childEnv) != "1" {
		return
	}
	if err := testBoot(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	fmt.Println(bootOK)
	os.Exit(0)
}
