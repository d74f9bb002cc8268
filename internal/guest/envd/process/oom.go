package process

import (
	"sync"

	"github.com/cove-dev/cove/internal/sandbox/cgroup"
	"golang.org/x/sys/unix"
)

// sandboxCgroup is the sandbox's cgroup seen from inside (v1 or v2, mounted read-only at
// /sys/fs/cgroup by the runtime): its OOM kill counter counts the processes the kernel's OOM
// killer ended in the sandbox.
var sandboxCgroup = sync.OnceValue(func() cgroup.FS { return cgroup.Detect("/sys/fs/cgroup") })

// oomKillText is the client's error for a command the OOM killer ended, instead of a bare
// "signal: killed".
const oomKillText = "oom_killed: the kernel's OOM killer ended it at the sandbox's memory limit (signal: killed)"

// guestOOMKillText is oomKillText where envd is the sandbox's OOM killer (guestoom.go).
const guestOOMKillText = "oom_killed: envd's OOM killer ended it at the sandbox's memory limit (signal: killed)"

// oomKills reads the sandbox's OOM kill count: the guest OOM killer's where it runs
// (guestoom.go), else the kernel's, or -1 when there is none to read (envd run outside a
// sandbox).
func oomKills() int64 {
	if n := guestKills.Load(); n != nil {
		return n.Load()
	}
	n, err := sandboxCgroup().OOMKills("", nil)
	if err != nil {
		return -1
	}
	return int64(n)
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
