package kvm

import (
	"fmt"
	"runtime"
	"unsafe"

	"golang.org/x/sys/unix"
)

// The ioctls and exit reasons of <linux/kvm.h> (x86-64) the test boot uses.
const (
	kvmGetAPIVersion       = 0xAE00
	kvmCreateVM            = 0xAE01
	kvmGetVCPUMmapSize     = 0xAE04
	kvmCreateVCPU          = 0xAE41
	kvmSetUserMemoryRegion = 0x4020AE46
	kvmRun                 = 0xAE80
	kvmGetRegs             = 0x8090AE81
	kvmSetRegs             = 0x4090AE82
	kvmGetSregs            = 0x8138AE83
	kvmSetSregs            = 0x4138AE84

	exitIO      = 2
	exitHLT     = 5
	exitIOOut   = 1
	guestAddr   = 0x1000
	guestPort   = 0x10
	guestAnswer = 0x42
)

// guestCode is real-mode x86: mov al,0x42; out 0x10,al; hlt.
var guestCode = []byte{0xB0, guestAnswer, 0xE6, guestPort, 0xF4}

type userMemoryRegion struct {
	Slot, Flags                       uint32
	GuestPhysAddr, MemorySize, UserVA uint64
}

type regs struct {
	RAX, RBX, RCX, RDX, RSI, RDI, RSP, RBP uint64
	R8, R9, R10, R11, R12, R13, R14, R15   uint64
	RIP, RFLAGS                            uint64
}

type segment struct {
	Base                                              uint64
	Limit                                             uint32
	Selector                                          uint16
	Type, Present, DPL, DB, S, L, G, AVL, Unusable, _ uint8
}

type dtable struct {
	Base  uint64
	Limit uint16
	_     [3]uint16
}

type sregs struct {
	CS, DS, ES, FS, GS, SS, TR, LDT segment
	GDT, IDT                        dtable
	CR0, CR2, CR3, CR4, CR8, EFER   uint64
	APICBase                        uint64
	InterruptBitmap                 [4]uint64
}

func ioctl(fd int, req, arg uintptr) (uintptr, error) {
	for {
		r, _, errno := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), req, arg)
		if errno == unix.EINTR {
			continue
		}
		if errno != 0 {
			return 0, errno
		}
		return r, nil
	}
}

// testBoot makes a VM with one page of memory holding guestCode, one vCPU in real mode at
// that code, and runs it: it must exit on an out of 0x42 to port 0x10, then on hlt.
func testBoot() error {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()

	kvm, err := unix.Open("/dev/kvm", unix.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("open /dev/kvm: %w", err)
	}
	defer unix.Close(kvm)
	vmfd, err := ioctl(kvm, kvmCreateVM, 0)
	if err != nil {
		return fmt.Errorf("KVM_CREATE_VM: %w", err)
	}
	vm := int(vmfd)
	defer unix.Close(vm)

	mem, err := unix.Mmap(-1, 0, 0x1000, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED|unix.MAP_ANONYMOUS)
	if err != nil {
		return fmt.Errorf("guest memory: %w", err)
	}
	defer unix.Munmap(mem)
	copy(mem, guestCode)
	region := userMemoryRegion{GuestPhysAddr: guestAddr, MemorySize: uint64(len(mem)), UserVA: uint64(uintptr(unsafe.Pointer(&mem[0])))}
	if _, err := ioctl(vm, kvmSetUserMemoryRegion, uintptr(unsafe.Pointer(&region))); err != nil {
		return fmt.Errorf("KVM_SET_USER_MEMORY_REGION: %w", err)
	}

	cpufd, err := ioctl(vm, kvmCreateVCPU, 0)
	if err != nil {
		return fmt.Errorf("KVM_CREATE_VCPU: %w", err)
	}
	cpu := int(cpufd)
	defer unix.Close(cpu)
	size, err := ioctl(kvm, kvmGetVCPUMmapSize, 0)
	if err != nil {
		return fmt.Errorf("KVM_GET_VCPU_MMAP_SIZE: %w", err)
	}
	run, err := unix.Mmap(cpu, 0, int(size), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return fmt.Errorf("map kvm_run: %w", err)
	}
	defer unix.Munmap(run)

	var s sregs
	if _, err := ioctl(cpu, kvmGetSregs, uintptr(unsafe.Pointer(&s))); err != nil {
		return fmt.Errorf("KVM_GET_SREGS: %w", err)
	}
	s.CS.Base, s.CS.Selector = 0, 0
	if _, err := ioctl(cpu, kvmSetSregs, uintptr(unsafe.Pointer(&s))); err != nil {
		return fmt.Errorf("KVM_SET_SREGS: %w", err)
	}
	r := regs{RIP: guestAddr, RFLAGS: 0x2}
	if _, err := ioctl(cpu, kvmSetRegs, uintptr(unsafe.Pointer(&r))); err != nil {
		return fmt.Errorf("KVM_SET_REGS: %w", err)
	}

	// struct kvm_run: exit_reason at 8; for KVM_EXIT_IO, direction at 32, size at 33, port
	// at 34, count at 36 and the data's offset in the mapping at 40.
	reason := func() uint32 { return *(*uint32)(unsafe.Pointer(&run[8])) }
	if _, err := ioctl(cpu, kvmRun, 0); err != nil {
		return fmt.Errorf("KVM_RUN: %w", err)
	}
	if got := reason(); got != exitIO {
		return fmt.Errorf("first exit: reason %d, want KVM_EXIT_IO (%d)", got, exitIO)
	}
	dir, port := run[32], *(*uint16)(unsafe.Pointer(&run[34]))
	off := *(*uint64)(unsafe.Pointer(&run[40]))
	if off >= uint64(len(run)) {
		return fmt.Errorf("KVM_EXIT_IO data offset %d outside the %d-byte kvm_run", off, len(run))
	}
	if dir != exitIOOut || port != guestPort || run[off] != guestAnswer {
		return fmt.Errorf("first exit: io direction %d port %#x value %#x, want out %#x on port %#x", dir, port, run[off], guestAnswer, guestPort)
	}
	if _, err := ioctl(cpu, kvmRun, 0); err != nil {
		return fmt.Errorf("KVM_RUN after the out: %w", err)
	}
	if got := reason(); got != exitHLT {
		return fmt.Errorf("second exit: reason %d, want KVM_EXIT_HLT (%d)", got, exitHLT)
	}
	return nil
}
