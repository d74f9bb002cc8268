package runtime

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"
)

// The runsc engine: gVisor's runsc drives a sandbox through the same OCI bundle as runc
// (bundle.go), with these differences, all behind the same methods:
//
//   - Its global flags (runscFlags): the systrap platform (KVM hangs on this machine class),
//     the host's network stack inside the sandbox's own namespace (--network=host: the
//     sandbox process joins the spec's network namespace, so Dial, the veth, nftables, DNS
//     and the egress proxy work unchanged), no overlay of its own on the root (Cove's
//     overlay already takes the writes, on the sandbox's disk), and the spec's cgroups.
//   - The pid Cove waits for is the sandbox process (runsc boot, the sentry): it exits with
//     the init's status. The sandbox's own processes are no host processes.
//   - Checkpoint and restore are runsc's own (checkpoint.go), not CRIU's.
//   - Freeze and Thaw are runsc pause and resume (the sentry stops its tasks itself).

// engineAnnotation names, in a sandbox's config.json, the engine that runs it, so that a
// restarted server (Adopt), a destroy after a crash and a reboot on kept files find it.
const engineAnnotation = "dev.cove.engine"

// runscFlags are runsc's global flags after --root.
var runscFlags = []string{
	"--platform=systrap",
	"--network=host",
	"--overlay2=none",
	"--ignore-cgroups=false",
	// A fork restores its source's checkpoint under its own id, root, network namespace,
	// cgroup and command line: runsc would refuse a spec that differs from the source's.
	"--restore-spec-validation=warning",
	// sudo as E2B's templates have it (passwordless, setuid root): gVisor ignores the
	// SUID/SGID bits unless told, as runc's kernel honours them. The ID gain stays inside the
	// sentry, and no_new_privs still stops it where a spec asks.
	"--allow-suid",
	// The spec's seccomp profile, enforced by the sentry for the sandbox's processes.
	"--oci-seccomp",
}

// findRunsc returns the runsc binary: path when given, else runsc beside the running
// executable, else runsc in PATH. It runs `runsc --version` to check it works.
func findRunsc(ctx context.Context, path string) (string, error) {
	if path == "" {
		if exe, err := os.Executable(); err == nil {
			if p := filepath.Join(filepath.Dir(exe), "runsc"); exists(p) {
				path = p
			}
		}
	}
	if path == "" {
		path = "runsc"
	}
	p, err := exec.LookPath(path)
	if err != nil {
		return "", fmt.Errorf("%w: no runsc binary (%s; COVE_RUNSC=1 scripts/deps.sh builds bin/runsc)", ErrUnsupported, err)
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if out, err := exec.CommandContext(ctx, p, "--version").CombinedOutput(); err != nil {
		return "", fmt.Errorf("%w: %s --version: %w: %s", ErrUnsupported, p, err, strings.TrimSpace(string(out)))
	}
	return p, nil
}

// Engines reports the engines this host offers: runc always, runsc when its binary is there.
func (r *Runc) Engines() []Engine {
	if r.runscErr != nil {
		return []Engine{EngineRunc}
	}
	return []Engine{EngineRunc, EngineRunsc}
}

// EngineErr says why engine cannot run sandboxes here, or nil when it can.
func (r *Runc) EngineErr(engine Engine) error {
	switch engine {
	case EngineRunc, "":
		return nil
	case EngineRunsc:
		if r.runscErr != nil {
			return fmt.Errorf("runtime engine runsc: %w", r.runscErr)
		}
		return nil
	}
	_, err := ParseEngine(string(engine))
	return err
}

// cli returns engine's binary and global flags.
func (r *Runc) cli(engine Engine) (string, []string, error) {
	if engine == EngineRunsc {
		if err := r.EngineErr(engine); err != nil {
			return "", nil, err
		}
		return r.cfg.RunscPath, append([]string{"--root", r.cfg.RunscRoot}, runscFlags...), nil
	}
	return r.cfg.RuncPath, []string{"--root", r.cfg.RuncRoot}, nil
}

// engineOf is the engine of sandbox id: the one it runs on, else the one its config.json
// names, else runc (a bundle written before there were engines).
func (r *Runc) engineOf(id string) Engine {
	if sb := r.get(id); sb != nil {
		return sb.engine
	}
	return bundleEngine(r.dir(id))
}

// bundleEngine reads the engine annotation of the config.json in dir.
func bundleEngine(dir string) Engine {
	b, err := os.ReadFile(filepath.Join(dir, "config.json"))
	if err != nil {
		return EngineRunc
	}
	var cfg struct {
		Annotations map[string]string `json:"annotations"`
	}
	if json.Unmarshal(b, &cfg) != nil {
		return EngineRunc
	}
	if e, err := ParseEngine(cfg.Annotations[engineAnnotation]); err == nil {
		return e
	}
	return EngineRunc
}

// Engine reports the engine sandbox id runs on.
func (r *Runc) Engine(id string) Engine { return r.engineOf(id) }

// runscCheckpointFile is the file a runsc checkpoint's state goes to in its image dir.
const runscCheckpointFile = "checkpoint.img"

// checkpointRunsc is Checkpoint for a runsc sandbox: `runsc checkpoint` stops its tasks,
// writes the sentry's whole state (tasks, memory, open files) to the image dir and ends
// the sandbox; the container left stopped is deleted, so Restore can create it again.
func (r *Runc) checkpointRunsc(ctx context.Context, sb *sandbox, begun time.Time) (CheckpointInfo, error) {
	id := sb.id
	img := r.checkpointDir(id)
	if err := os.RemoveAll(img); err != nil {
		return CheckpointInfo{}, fmt.Errorf("checkpoint %s: %w", id, err)
	}
	if err := os.Mkdir(img, 0o700); err != nil {
		return CheckpointInfo{}, fmt.Errorf("checkpoint %s: %w", id, err)
	}
	sb.checkpointing.Store(true)
	if _, err := r.runc(ctx, EngineRunsc, "checkpoint", "--image-path", img, id); err != nil {
		sb.checkpointing.Store(false)
		if strings.Contains(err.Error(), "no space left on device") || nearlyFull(img) {
			err = fmt.Errorf("%w: %w", ErrNoSpace, err)
		}
		_ = os.RemoveAll(img)
		return CheckpointInfo{}, fmt.Errorf("checkpoint %s: %w", id, err)
	}
	select {
	case <-sb.exited:
	case <-time.After(10 * time.Second):
		return CheckpointInfo{}, fmt.Errorf("checkpoint %s: sandbox process %d still runs after its checkpoint", id, sb.pid)
	}
	releaseStdio(r.dir(id)) // a restore gets new pipes, and a holder of its own
	if _, err := r.runc(ctx, EngineRunsc, "delete", "--force", id); err != nil && !errors.Is(err, ErrNotFound) {
		return CheckpointInfo{}, fmt.Errorf("checkpoint %s: %w", id, err)
	}
	return CheckpointInfo{Bytes: diskBytes(img), Duration: time.Since(begun)}, nil
}

// runscHostTasks is what a runsc sandbox's host pids cgroup holds beside its own tasks: the
// sentry's and gofer's threads, 25 to 60 measured on a quiet host. The sentry is a Go
// program: starved of CPU it starts more threads (one for each blocked in a system call),
// and at pids.max it cannot start the host side of a new task, so nothing runs in the
// sandbox again (CI saw a user's fork bomb, killed, leave no command able to start for 90 s
// on a loaded host with 64). The limit inside is RLIMIT_NPROC; this is only the wall behind.
const runscHostTasks = 512

// runscSpec adapts a sandbox's OCI spec to runsc:
//
//   - PIDs: gVisor applies the spec's pids limit only to the host cgroup, where each task of
//     the sandbox is two host tasks (systrap's stubs; 25 + 2 per task measured) beside the
//     sentry's own; at pids.max there
//     the sentry cannot start a thread and the whole sandbox ends. The sentry does enforce
//     RLIMIT_NPROC (tasks per user, for every user without CAP_SYS_ADMIN or CAP_SYS_RESOURCE,
//     which no sandbox has: root included), so that is the limit inside: a fork bomb gets
//     EAGAIN, as under runc's pids cgroup, and the sandbox lives on. The host's pids.max stays
//     the wall behind it: three times the limit plus runscHostTasks, room for one user at the
//     limit, half as many tasks of root's (envd's) and the sentry's threads.
//   - Seccomp: the profile stays, enforced by the sentry (--oci-seccomp) for the sandbox's
//     processes, less the clone3 rule: gVisor answers every denied call with EPERM (it
//     ignores errnoRet), where libc falls back to clone only on ENOSYS, and the rule is there
//     only because a host filter cannot read clone3's flags; the sentry checks them itself.
//   - /tmp: the root's own /tmp is bound on /tmp. runsc mounts a tmpfs of the sentry's
//     memory on an empty /tmp unless the spec mounts something there, and what a sandbox
//     writes in /tmp must land in its root as on runc (its disk limit, a filesystem-only
//     pause, uploads, what the host reads of it).
//
// runsc ignores maskedPaths and readonlyPaths: what they hide is the host kernel's, and the
// sentry's /proc and /sys are its own (docs/runtimes.md).
func runscSpec(spec *specs.Spec) {
	tmp := filepath.Join(spec.Root.Path, "tmp")
	if fi, err := os.Lstat(tmp); err == nil && fi.IsDir() {
		spec.Mounts = append(spec.Mounts, specs.Mount{Destination: "/tmp", Type: "bind", Source: tmp, Options: []string{"rbind", "nosuid", "nodev"}})
	}
	if res := spec.Linux.Resources; res != nil && res.Pids != nil && res.Pids.Limit != nil && *res.Pids.Limit > 0 {
		n := *res.Pids.Limit
		rlimits := []specs.POSIXRlimit{{Type: "RLIMIT_NPROC", Hard: uint64(n), Soft: uint64(n)}}
		for _, rl := range spec.Process.Rlimits {
			if rl.Type != "RLIMIT_NPROC" {
				rlimits = append(rlimits, rl)
			}
		}
		spec.Process.Rlimits = rlimits
		l := 3*n + runscHostTasks
		res.Pids = &specs.LinuxPids{Limit: &l}
	}
	if sc := spec.Linux.Seccomp; sc != nil {
		var rules []specs.LinuxSyscall
		for _, rule := range sc.Syscalls {
			if names := slices.DeleteFunc(slices.Clone(rule.Names), func(n string) bool { return n == "clone3" }); len(names) > 0 {
				rule.Names = names
				rules = append(rules, rule)
			}
		}
		sc.Syscalls = rules
	}
}

// runscMemoryHeadroom is how far above a runsc sandbox's memory limit its host cgroup's
// limit lies: a quarter of the limit, at least 256 MiB and at most 1 GiB. What the host
// charges beside the sandbox's own memory must fit in it: the sentry's memory (20 to 40 MiB
// measured), its stub processes' (130 MiB in all measured after a fork bomb of 512 tasks was
// killed), and what a process allocates while envd, the sandbox's OOM killer, takes its next
// look (envd looks every few milliseconds near the limit; a process zeroing fresh memory
// under gVisor takes about 1 GiB/s here).
func runscMemoryHeadroom(limit int64) int64 { return min(max(limit/4, 256<<20), 1<<30) }

// raiseRunscMemory gives the host memory cgroup of a runsc sandbox with memory limit limit
// its headroom. gVisor enforces no memory limit inside (its cgroup keeps the number and
// nothing more), so with the host's limit at the sandbox's the host's OOM killer would end
// the whole sandbox, sentry and all, for one process past it. runsc has already sized the
// sentry to the spec's limit (--total-memory, which the sandbox's /proc/meminfo and its
// cgroup's memory.limit_in_bytes show, and which envd holds the sandbox to); the host's
// limit goes up after that. On cgroup v2, memory.high at half the headroom slows an
// allocator down while envd acts.
func raiseRunscMemory(cgroupPath string, limit int64) error {
	host := limit + runscMemoryHeadroom(limit)
	v := strconv.FormatInt(host, 10)
	var files []string
	if hostCgroups().V2 {
		dir := filepath.Join(cgroupRoot, cgroupPath)
		files = []string{filepath.Join(dir, "memory.max"), filepath.Join(dir, "memory.high")}
	} else {
		dir := filepath.Join(cgroupRoot, "memory", cgroupPath)
		// memory+swap never below memory: the larger one goes up first.
		if swapAccounting() {
			files = append(files, filepath.Join(dir, "memory.memsw.limit_in_bytes"))
		}
		files = append(files, filepath.Join(dir, "memory.limit_in_bytes"))
	}
	for _, f := range files {
		val := v
		if strings.HasSuffix(f, "memory.high") {
			val = strconv.FormatInt(limit+runscMemoryHeadroom(limit)/2, 10)
		}
		if err := writeControl(f, val); err != nil {
			return fmt.Errorf("memory headroom: %w", err)
		}
	}
	return nil
}

// configMemoryLimit is the memory limit of the OCI spec cfg (a sandbox's config.json), 0
// when it has none.
func configMemoryLimit(cfg []byte) int64 {
	var spec struct {
		Linux *struct {
			Resources *struct {
				Memory *struct {
					Limit *int64 `json:"limit"`
				} `json:"memory"`
			} `json:"resources"`
		} `json:"linux"`
	}
	if json.Unmarshal(cfg, &spec) != nil || spec.Linux == nil || spec.Linux.Resources == nil ||
		spec.Linux.Resources.Memory == nil || spec.Linux.Resources.Memory.Limit == nil {
		return 0
	}
	return max(*spec.Linux.Resources.Memory.Limit, 0)
}

// runscState is what this driver reads of runsc's state file of a sandbox.
type runscState struct {
	GoferPid int `json:"goferPid"`
}

// reapGofer waits, in the background, for sandbox id's gofer (runsc's file server beside the
// sentry), which becomes this process's child as the sentry does (we are a subreaper): once
// the sandbox ends it exits too, and must not stay a zombie.
func (r *Runc) reapGofer(id string) {
	b, err := os.ReadFile(filepath.Join(r.cfg.RunscRoot, id+"_sandbox:"+id+".state"))
	if err != nil {
		return
	}
	var st runscState
	if json.Unmarshal(b, &st) != nil || st.GoferPid <= 0 || parentOf(st.GoferPid) != os.Getpid() {
		return
	}
	if p, err := os.FindProcess(st.GoferPid); err == nil {
		go func() { _, _ = p.Wait() }()
	}
}

// parentOf returns pid's parent pid, or 0.
func parentOf(pid int) int {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	if len(f) < 2 {
		return 0
	}
	ppid, _ := strconv.Atoi(f[1])
	return ppid
}

// stdioFile, in a runsc sandbox's directory, names the pipes that are its init's stdout and
// stderr (pipe:[inode] each, a line each): the sentry holds them at descriptors of its
// own choosing, so Adopt finds them among the sandbox process's by these names.
const stdioFile = "stdio"

// recordStdio writes the names of the write ends' pipes, out and err, to the sandbox's dir.
func recordStdio(dir string, out, err *os.File) error {
	var names []string
	for _, f := range []*os.File{out, err} {
		name, e := os.Readlink(fmt.Sprintf("/proc/self/fd/%d", f.Fd()))
		if e != nil {
			return e
		}
		names = append(names, name)
	}
	return os.WriteFile(filepath.Join(dir, stdioFile), []byte(strings.Join(names, "\n")+"\n"), 0o600)
}

// openRunscStdio opens new read ends of a runsc sandbox's stdout and stderr pipes: the
// sandbox process's descriptors that are the pipes recordStdio named.
func openRunscStdio(dir string, pid int) (stdout, stderr *os.File, err error) {
	b, err := os.ReadFile(filepath.Join(dir, stdioFile))
	if err != nil {
		return nil, nil, fmt.Errorf("%w: no record of its stdio pipes: %w", ErrNotAdoptable, err)
	}
	names := strings.Fields(string(b))
	if len(names) != 2 {
		return nil, nil, fmt.Errorf("%w: stdio record %q", ErrNotAdoptable, b)
	}
	fds, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	if err != nil {
		return nil, nil, fmt.Errorf("sandbox process %d: %w: %w", pid, err, ErrNotFound)
	}
	found := make([]string, 2)
	for _, fd := range fds {
		link := fmt.Sprintf("/proc/%d/fd/%s", pid, fd.Name())
		target, _ := os.Readlink(link)
		for i, n := range names {
			if target == n && found[i] == "" {
				found[i] = link
			}
		}
	}
	var files []*os.File
	for i, link := range found {
		if link == "" {
			for _, f := range files {
				f.Close()
			}
			return nil, nil, fmt.Errorf("%w: the sandbox holds no %s (its %s)", ErrNotAdoptable, names[i], []string{"stdout", "stderr"}[i])
		}
		f, err := os.OpenFile(link, os.O_RDONLY|unix.O_NONBLOCK, 0)
		if err != nil {
			for _, f := range files {
				f.Close()
			}
			return nil, nil, fmt.Errorf("open %s: %w", link, err)
		}
		growPipe(f)
		files = append(files, f)
	}
	return files[0], files[1], nil
}

// runscProcessesMax bounds the processes processesRunsc describes: each costs two runsc
// calls (its status and command line, read through the sentry).
const runscProcessesMax = 32

// processesRunsc lists a runsc sandbox's processes as the sentry knows them (runsc ps, whose
// JSON is their pids), each with its parent, state, RSS and command line read from the
// sandbox's own /proc (runsc read):
// HostPID is 0, since they are no host processes. Biggest memory first.
func (r *Runc) processesRunsc(ctx context.Context, id string) ([]Process, error) {
	b, err := r.runc(ctx, EngineRunsc, "ps", "--format=json", id)
	if err != nil {
		return nil, fmt.Errorf("processes of %s: %w", id, err)
	}
	var ps []int
	if err := json.Unmarshal(b, &ps); err != nil {
		return nil, fmt.Errorf("processes of %s: runsc ps: %w", id, err)
	}
	if len(ps) > runscProcessesMax {
		ps = ps[:runscProcessesMax]
	}
	out := make([]Process, len(ps))
	var wg sync.WaitGroup
	sem := make(chan struct{}, 4)
	for i, pid := range ps {
		out[i] = Process{PID: pid}
		wg.Add(1)
		go func() {
			defer wg.Done()
			sem <- struct{}{}
			defer func() { <-sem }()
			proc := fmt.Sprintf("/proc/%d/", pid)
			if status, err := r.runc(ctx, EngineRunsc, "read", "--size", "8192", id, proc+"status"); err == nil {
				for _, line := range strings.Split(string(status), "\n") {
					k, v, _ := strings.Cut(line, ":")
					f := strings.Fields(v)
					switch {
					case len(f) == 0:
					case k == "State":
						out[i].State = f[0]
					case k == "PPid":
						out[i].PPID, _ = strconv.Atoi(f[0])
					case k == "Name" && out[i].Command == "":
						out[i].Command = "[" + f[0] + "]"
					case k == "VmRSS":
						kb, _ := strconv.ParseUint(f[0], 10, 64)
						out[i].RSSBytes = kb << 10
					}
				}
			}
			if cmd, err := r.runc(ctx, EngineRunsc, "read", "--size", "4096", id, proc+"cmdline"); err == nil && len(cmd) > 0 {
				out[i].Command = strings.TrimSpace(strings.ReplaceAll(string(cmd), "\x00", " "))
			}
		}()
	}
	wg.Wait()
	sort.Slice(out, func(i, j int) bool { return out[i].RSSBytes > out[j].RSSBytes })
	return out, nil
}

// stdioHolderFile, in a runsc sandbox's directory, holds the pid of the process that keeps
// read ends of the sandbox's stdout and stderr open (holdStdio).
const stdioHolderFile = "stdio.holder"

// holdStdio starts a process that holds read ends of a runsc sandbox's stdout and stderr
// pipes (out and err) open for the sandbox's life, and outlives the server: a write while
// no server reads (it restarts) then waits in the pipe's buffer instead of failing. Under
// runc envd holds them itself, inside (envd.HoldHostPipes); under gVisor its stdio are the
// sentry's host files, which it cannot open again for reading. The holder is `sleep
// infinity` in a session of its own, its fds 3 and 4 the read ends; releaseStdio ends it.
func holdStdio(dir string, out, err *os.File) error {
	// Copies of the descriptors go to the holder: os/exec would make the caller's own
	// blocking (File.Fd), and a Close could then no longer end a Read in progress.
	var extra []*os.File
	defer func() {
		for _, f := range extra {
			f.Close()
		}
	}()
	for _, f := range []*os.File{out, err} {
		rc, e := f.SyscallConn()
		if e != nil {
			return fmt.Errorf("hold the stdio pipes: %w", e)
		}
		var nfd int
		var derr error
		if e := rc.Control(func(fd uintptr) { nfd, derr = unix.FcntlInt(fd, unix.F_DUPFD_CLOEXEC, 0) }); e != nil || derr != nil {
			return fmt.Errorf("hold the stdio pipes: dup: %w", errors.Join(e, derr))
		}
		extra = append(extra, os.NewFile(uintptr(nfd), f.Name()))
	}
	cmd := exec.Command("sleep", "infinity")
	cmd.ExtraFiles = extra
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if e := cmd.Start(); e != nil {
		return fmt.Errorf("hold the stdio pipes: %w", e)
	}
	go func() { _ = cmd.Wait() }() // reaped when releaseStdio ends it, while this server runs
	if e := os.WriteFile(filepath.Join(dir, stdioHolderFile), []byte(strconv.Itoa(cmd.Process.Pid)), 0o600); e != nil {
		_ = cmd.Process.Kill()
		return fmt.Errorf("hold the stdio pipes: %w", e)
	}
	return nil
}

// releaseStdio ends the process holdStdio started for the sandbox in dir, if it still runs
// and is the one (its fd 3 is the pipe the stdio record names: a pid may have been reused
// since a server restarted).
func releaseStdio(dir string) {
	file := filepath.Join(dir, stdioHolderFile)
	b, err := os.ReadFile(file)
	if err != nil {
		return
	}
	defer os.Remove(file)
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || pid <= 0 {
		return
	}
	rec, _ := os.ReadFile(filepath.Join(dir, stdioFile))
	names := strings.Fields(string(rec))
	held, _ := os.Readlink(fmt.Sprintf("/proc/%d/fd/3", pid))
	if len(names) == 0 || held != names[0] {
		return
	}
	_ = syscall.Kill(pid, syscall.SIGKILL)
}
