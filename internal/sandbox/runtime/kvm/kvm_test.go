package kvm

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"
	"unsafe"
)

func TestMain(m *testing.M) {
	ServeTestBoot()
	os.Exit(m.Run())
}

func TestTheIoctlStructsHaveTheKernelsSizes(t *testing.T) {
	for _, c := range []struct {
		name      string
		got, want uintptr
	}{
		{"kvm_userspace_memory_region", unsafe.Sizeof(userMemoryRegion{}), 32},
		{"kvm_regs", unsafe.Sizeof(regs{}), 144},
		{"kvm_sregs", unsafe.Sizeof(sregs{}), 312},
	} {
		if c.got != c.want {
			t.Errorf("%s is %d bytes, the kernel's is %d (the ioctl numbers encode it)", c.name, c.got, c.want)
		}
	}
}

func TestHardwareVirtReadsTheFlagsLine(t *testing.T) {
	for _, c := range []struct {
		name, cpuinfo, want string
	}{
		{"an Intel CPU with VT-x says vmx", "processor\t: 0\nflags\t\t: fpu vme vmx sse2\n", "vmx"},
		{"an AMD CPU with AMD-V says svm", "flags\t\t: fpu svm lm\n", "svm"},
		{"a CPU without either says nothing", "flags\t\t: fpu vme sse2 hypervisor\n", ""},
		{"a word only inside another line is not a flag", "model name\t: vmx svm\nflags\t: fpu\n", ""},
		{"a flag that merely contains vmx is not vmx", "flags\t: vmxe svm_lock\n", ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			if got := hardwareVirt([]byte(c.cpuinfo)); got != c.want {
				t.Errorf("hardwareVirt = %q, want %q", got, c.want)
			}
		})
	}
}

func TestTheReportIsConsistentWithTheMachine(t *testing.T) {
	cpuinfo, err := os.ReadFile("/proc/cpuinfo")
	if err != nil {
		t.Fatal(err)
	}
	r := Detect(context.Background())
	t.Logf("KVM: %s (device %v, API %d, vmx/svm %q, test boot %v)", r, r.Device, r.APIVersion, r.HardwareVirt, r.TestBoot)
	virt := hardwareVirt(cpuinfo)
	switch {
	case r.Usable && (virt == "" || !r.TestBoot || !r.Device || r.APIVersion != apiVersion):
		t.Errorf("usable, but vmx/svm %q, test boot %v, device %v, API %d", virt, r.TestBoot, r.Device, r.APIVersion)
	case r.Usable && r.String() != "usable":
		t.Errorf("a usable report reads %q", r)
	case !r.Usable && (r.Reason == "" || !strings.HasPrefix(r.String(), "not here: ")):
		t.Errorf("an unusable report reads %q, want \"not here: <why>\"", r)
	case virt == "" && r.Usable:
		t.Errorf("usable on a CPU without vmx or svm")
	case virt == "" && r.Device && r.APIVersion == apiVersion && !strings.Contains(r.Reason, "vmx or svm"):
		t.Errorf("no vmx or svm here, but the reason is %q", r.Reason)
	}
	if _, err := os.Stat("/dev/kvm"); err != nil && r.Device {
		t.Errorf("the device opened, but /dev/kvm: %v", err)
	}
}

// The test boot runs in a child with a limit: whatever this machine's KVM does (boot, refuse
// or hang), the caller gets an answer once the limit is past.
func TestTheTestBootAnswersWithinItsLimit(t *testing.T) {
	if _, err := os.Stat("/dev/kvm"); err != nil {
		t.Skipf("no /dev/kvm here: %v", err)
	}
	const limit = 3 * time.Second
	done := make(chan error, 1)
	go func() { done <- runTestBoot(context.Background(), limit) }()
	select {
	case err := <-done:
		t.Logf("test boot: %v", err)
	case <-time.After(limit + 10*time.Second):
		t.Fatalf("the test boot did not answer within its limit of %s", limit)
	}
}
