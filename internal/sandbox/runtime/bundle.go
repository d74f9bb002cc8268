package runtime

import (
	"strings"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"
)

// defaultCaps is containerd's and Docker's default capability set: runc's own three
// (AUDIT_WRITE, KILL, NET_BIND_SERVICE) plus what envd needs as root to run commands as another
// user (SETUID, SETGID), own files for them (CHOWN, FOWNER, DAC_OVERRIDE, FSETID) and what
// package managers expect (MKNOD, SETFCAP, SETPCAP, SYS_CHROOT, NET_RAW).
var defaultCaps = []string{
	"CAP_CHOWN", "CAP_DAC_OVERRIDE", "CAP_FSETID", "CAP_FOWNER", "CAP_MKNOD", "CAP_NET_RAW",
	"CAP_SETGID", "CAP_SETUID", "CAP_SETFCAP", "CAP_SETPCAP", "CAP_NET_BIND_SERVICE",
	"CAP_SYS_CHROOT", "CAP_KILL", "CAP_AUDIT_WRITE",
}

// maskedPaths and readonlyPaths are runc's `runc spec` defaults, and masked besides what
// tells a tenant about the host: its kernel command line and its block devices.
var (
	maskedPaths = []string{
		"/proc/acpi", "/proc/asound", "/proc/kcore", "/proc/keys", "/proc/latency_stats",
		"/proc/timer_list", "/proc/timer_stats", "/proc/sched_debug", "/sys/firmware", "/proc/scsi",
		"/proc/cmdline", "/proc/partitions", "/proc/diskstats",
		"/sys/block", "/sys/class/block", "/sys/dev/block", "/sys/devices/virtual/block",
	}
	readonlyPaths = []string{
		"/proc/bus", "/proc/fs", "/proc/irq", "/proc/sys", "/proc/sysrq-trigger",
	}
)

const defaultPath = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// ociSpec is the OCI runtime configuration of one sandbox. root is the directory runc uses as
// the root (the overlay mount, or the rootfs itself for Direct), netns the pinned namespace
// ("" for the host's), cgroupPath the absolute cgroup path.
func ociSpec(s Spec, root, netns, cgroupPath string, seccomp bool) *specs.Spec {
	home := "/root"
	if s.UID != 0 {
		home = "/"
	}
	env := withDefault(s.Env, defaultPath, "HOME="+home, "HOSTNAME="+s.ID)
	cwd := s.Cwd
	if cwd == "" {
		cwd = "/"
	}
	caps := append([]string(nil), defaultCaps...)

	namespaces := []specs.LinuxNamespace{
		{Type: specs.PIDNamespace},
		{Type: specs.MountNamespace},
		{Type: specs.UTSNamespace},
		{Type: specs.IPCNamespace},
		{Type: specs.CgroupNamespace},
	}
	if netns != "" {
		namespaces = append(namespaces, specs.LinuxNamespace{Type: specs.NetworkNamespace, Path: netns})
	}

	mounts := []specs.Mount{
		{Destination: "/proc", Type: "proc", Source: "proc", Options: []string{"nosuid", "noexec", "nodev"}},
		{Destination: "/dev", Type: "tmpfs", Source: "tmpfs", Options: []string{"nosuid", "strictatime", "mode=755", "size=65536k"}},
		{Destination: "/dev/pts", Type: "devpts", Source: "devpts", Options: []string{"nosuid", "noexec", "newinstance", "ptmxmode=0666", "mode=0620", "gid=5"}},
		{Destination: "/dev/shm", Type: "tmpfs", Source: "shm", Options: []string{"nosuid", "noexec", "nodev", "mode=1777", "size=65536k"}},
		{Destination: "/dev/mqueue", Type: "mqueue", Source: "mqueue", Options: []string{"nosuid", "noexec", "nodev"}},
		{Destination: "/sys/fs/cgroup", Type: "cgroup", Source: "cgroup", Options: []string{"nosuid", "noexec", "nodev", "relatime", "ro"}},
	}
	if netns != "" {
		// sysfs shows the network namespace of whoever mounts it: only mount it with our own.
		mounts = append(mounts[:5], append([]specs.Mount{
			{Destination: "/sys", Type: "sysfs", Source: "sysfs", Options: []string{"nosuid", "noexec", "nodev", "ro"}},
		}, mounts[5:]...)...)
	} else {
		mounts = append(mounts[:5], append([]specs.Mount{
			{Destination: "/sys", Type: "bind", Source: "/sys", Options: []string{"rbind", "nosuid", "noexec", "nodev", "ro"}},
		}, mounts[5:]...)...)
		mounts = append(mounts, specs.Mount{Destination: "/etc/resolv.conf", Type: "bind", Source: "/etc/resolv.conf", Options: []string{"bind", "ro"}})
	}
	for _, b := range s.Binds {
		opts := []string{"rbind", "nosuid", "nodev"}
		if b.ReadOnly {
			opts = append(opts, "ro")
		}
		mounts = append(mounts, specs.Mount{Destination: b.Target, Type: "bind", Source: b.Source, Options: opts})
	}

	res := &specs.LinuxResources{
		Devices: []specs.LinuxDeviceCgroup{{Allow: false, Access: "rwm"}},
	}
	if l := s.Limits.MemoryBytes; l > 0 {
		// No swap on these hosts; with swap accounting, memory+swap gets the same cap.
		res.Memory = &specs.LinuxMemory{Limit: &l}
		if swapAccounting() {
			res.Memory.Swap = &l
		}
	}
	if s.Limits.CPUs > 0 {
		period := uint64(100_000)
		quota := int64(s.Limits.CPUs * float64(period))
		res.CPU = &specs.LinuxCPU{Quota: &quota, Period: &period}
	}
	if l := s.Limits.PIDs; l > 0 {
		res.Pids = &specs.LinuxPids{Limit: &l}
	}

	var rlimits []specs.POSIXRlimit
	if l := s.Limits.NoFile; l > 0 {
		rlimits = append(rlimits, specs.POSIXRlimit{Type: "RLIMIT_NOFILE", Hard: l, Soft: l})
	}

	spec := &specs.Spec{
		Version: specs.Version,
		Process: &specs.Process{
			User:    specs.User{UID: s.UID, GID: s.GID},
			Args:    s.Args,
			Env:     env,
			Cwd:     cwd,
			Rlimits: rlimits,
			Capabilities: &specs.LinuxCapabilities{
				Bounding: caps, Effective: caps, Permitted: caps,
			},
			// Setuid programs keep working (sudo, as E2B users expect of the user account):
			// capabilities stay bounded by caps and seccomp applies to root as to anyone.
			NoNewPrivileges: false,
		},
		Root:     &specs.Root{Path: root},
		Hostname: s.ID,
		Mounts:   mounts,
		Linux: &specs.Linux{
			CgroupsPath:   cgroupPath,
			Resources:     res,
			Namespaces:    namespaces,
			MaskedPaths:   maskedPaths,
			ReadonlyPaths: readonlyPaths,
		},
	}
	if seccomp {
		spec.Linux.Seccomp = seccompProfile()
	}
	if canLowerOOMScore() {
		// The sandbox's init (envd) is the OOM killer's last choice, so a memory-hungry
		// command never takes the control plane with it. Without CAP_SYS_RESOURCE no score
		// can go below 0; envd then stays at 0 and raises its commands to 1000 itself.
		adj := initOOMScoreAdj
		spec.Process.OOMScoreAdj = &adj
	}
	return spec
}

// initOOMScoreAdj is the sandbox init's OOM score adjustment where the host may lower it:
// just above -1000, which would exempt it entirely.
const initOOMScoreAdj = -998

// canLowerOOMScore says this process holds CAP_SYS_RESOURCE, which a negative
// oom_score_adj needs (runc fails the create otherwise).
func canLowerOOMScore() bool {
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	if err := unix.Capget(&hdr, &data[0]); err != nil {
		return false
	}
	return data[unix.CAP_SYS_RESOURCE/32].Effective&(1<<(unix.CAP_SYS_RESOURCE%32)) != 0
}

// withDefault appends each default KEY=value whose key env does not set.
func withDefault(env []string, defaults ...string) []string {
	out := append([]string(nil), env...)
	for _, d := range defaults {
		key, _, _ := strings.Cut(d, "=")
		found := false
		for _, e := range env {
			if strings.HasPrefix(e, key+"=") {
				found = true
				break
			}
		}
		if !found {
			out = append(out, d)
		}
	}
	return out
}

func swapAccounting() bool {
	return unix.Access(cgroupRoot+"/memory/memory.memsw.limit_in_bytes", unix.F_OK) == nil
}

// seccompProfile allows every system call except those that reach the kernel's most exposed
// or host-global surfaces (modules, kexec, keyrings, bpf, perf, mounts, namespaces, clock,
// io_uring), which fail with EPERM. A denylist keeps whatever a template installs working; the
// capability set already blocks most of these, this removes the kernel attack surface too.
func seccompProfile() *specs.LinuxSeccomp {
	eperm := uint(unix.EPERM)
	enosys := uint(unix.ENOSYS)
	p := &specs.LinuxSeccomp{
		DefaultAction: specs.ActAllow,
		Architectures: []specs.Arch{specs.ArchX86_64, specs.ArchX86, specs.ArchX32},
		Syscalls: []specs.LinuxSyscall{
			{
				Action:   specs.ActErrno,
				ErrnoRet: &eperm,
				Names: []string{
					"acct", "add_key", "bpf", "clock_adjtime", "clock_settime", "create_module",
					"delete_module", "finit_module", "fsconfig", "fsmount", "fsopen", "fspick",
					"get_kernel_syms", "init_module", "io_uring_enter", "io_uring_register",
					"io_uring_setup", "ioperm", "iopl", "kcmp", "kexec_file_load", "kexec_load",
					"keyctl", "lookup_dcookie", "mount", "mount_setattr", "move_mount",
					"name_to_handle_at", "nfsservctl", "open_by_handle_at", "open_tree",
					"perf_event_open", "pivot_root", "query_module", "quotactl", "quotactl_fd",
					"reboot", "request_key", "setns", "settimeofday", "stime", "swapoff", "swapon",
					"_sysctl", "syslog", "umount", "umount2", "unshare", "uselib", "userfaultfd",
					"ustat", "vm86", "vm86old",
				},
			},
			{
				// clone3 passes its flags in memory seccomp cannot read: ENOSYS makes libc fall back to clone.
				Action:   specs.ActErrno,
				ErrnoRet: &enosys,
				Names:    []string{"clone3"},
			},
		},
	}
	// New namespaces from clone(2), as Docker's profile refuses them without CAP_SYS_ADMIN:
	// one rule per flag, since a rule's argument conditions all have to match.
	for _, flag := range []uint64{
		unix.CLONE_NEWNS, unix.CLONE_NEWUTS, unix.CLONE_NEWIPC, unix.CLONE_NEWUSER,
		unix.CLONE_NEWPID, unix.CLONE_NEWNET, unix.CLONE_NEWCGROUP,
	} {
		p.Syscalls = append(p.Syscalls, specs.LinuxSyscall{
			Action: specs.ActErrno, ErrnoRet: &eperm, Names: []string{"clone"},
			Args: []specs.LinuxSeccompArg{{Index: 0, Value: flag, ValueTwo: flag, Op: specs.OpMaskedEqual}},
		})
	}
	return p
}
