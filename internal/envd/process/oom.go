package process

import (
	"bytes"
	"strconv"

	"golang.org/x/sys/unix"
)

// memoryOOMControl is the sandbox's memory cgroup file whose oom_kill line counts the
// processes the kernel's OOM killer ended in the sandbox (cgroup v1, mounted read-only at
// /sys/fs/cgroup by the runtime).
const memoryOOMControl = "/sys/fs/cgroup/memory/memory.oom_control"

// oomKillText is the client's error for a command the OOM killer ended, instead of a bare
// "signal: killed".
const oomKillText = "oom_killed: the kernel's OOM killer ended it at the sandbox's memory limit (signal: killed)"

// oomKills reads the sandbox's OOM kill count, or -1 when the file is not there (envd run
// outside a sandbox, a kernel without the counter).
func oomKills() int64 {
	fd, err := unix.Open(memoryOOMControl, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1
	}
	defer unix.Close(fd)
	var buf [256]byte
	n, err := unix.Read(fd, buf[:])
	if err != nil || n <= 0 {
		return -1
	}
	return parseOOMKills(buf[:n])
}

// parseOOMKills returns the oom_kill count of a memory.oom_control text, or -1.
func parseOOMKills(b []byte) int64 {
	for line := range bytes.Lines(b) {
		if v, ok := bytes.CutPrefix(line, []byte("oom_kill ")); ok {
			if n, err := strconv.ParseInt(string(bytes.TrimSpace(v)), 10, 64); err == nil {
				return n
			}
		}
	}
	return -1
}

// oomKilled says ex was the OOM killer's doing: a SIGKILL nobody sent through envd, while
// the sandbox's OOM kill count rose during the process's life. (A SIGKILL sent from inside
// the sandbox at the very moment another process is OOM-killed would read as one too.)
func (p *proc) oomKilled(ex exit) bool {
	if ex.Exited || ex.Signal != unix.SIGKILL {
		return false
	}
	p.mu.Lock()
	sent, before := p.signal.cause != "", p.oomBefore
	p.mu.Unlock()
	if sent || before < 0 {
		return false
	}
	return oomKills() > before
}
