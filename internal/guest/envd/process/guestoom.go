package process

import (
	"bytes"
	"context"
	"log/slog"
	"os"
	"strconv"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/cove-dev/cove/internal/observe/telemetry"
	"github.com/cove-dev/cove/internal/sandbox/cgroup"
	"github.com/cove-dev/cove/sdk/envdapi"
)

// The guest OOM killer: where the kernel under envd has no OOM killer for the sandbox, envd
// is it. Under gVisor the sandbox's memory cgroup is the sentry's, which keeps the limit
// (memory.limit_in_bytes) but enforces nothing, and the host's OOM killer sees only the
// sentry: a process past the limit would end the whole sandbox. So envd, as the sandbox's
// init, watches the memory the sandbox's processes hold against the limit and, past it,
// SIGKILLs the process the kernel would choose (the most resident memory, weighed by
// oom_score_adj; never envd), and counts the kill where envd's OOM attribution reads the
// kernel's count: the command's end then says oom_killed, as under runc. The runtime gives
// the host cgroup headroom above the limit (internal/sandbox/runtime, runsc.go), so the host's
// OOM killer stays the wall behind this one.

// guestKills is the count of the guest OOM killer's kills, nil when it is not running:
// oomKills reads it in place of the cgroup's.
var guestKills atomic.Pointer[atomic.Int64]

// fastestAlloc is the allocation rate the poll interval assumes (bytes a second): the wait
// until the next look is the time this rate needs to fill the room left (measured under
// gVisor here: about 1 GiB/s for a process zeroing fresh memory).
const fastestAlloc = 2 << 30

// Bounds of the poll interval: near the limit every few milliseconds; far from it four
// times a second (a read of /proc/meminfo costs about 0.3 ms under gVisor).
const (
	guestPollMin = 5 * time.Millisecond
	guestPollMax = 250 * time.Millisecond
)

// unlimited: a v1 cgroup without a limit reads as a number near 2^63.
const unlimited = 1 << 62

// guestOOMLimit returns the sandbox's memory limit when envd must be its OOM killer: its
// cgroup has a limit but keeps no OOM kill count, the mark of a kernel (gVisor's sentry)
// without a memory cgroup OOM killer. ok is false under runc and outside a sandbox.
func guestOOMLimit() (limit uint64, ok bool) {
	fs := sandboxCgroup()
	if _, err := fs.OOMKills("", nil); err == nil {
		return 0, false
	}
	limit, err := fs.ReadLimit("", nil)
	if err != nil || limit == 0 || limit >= unlimited {
		return 0, false
	}
	if _, err := anonBytes("/proc/meminfo", make([]byte, 4096)); err != nil {
		return 0, false
	}
	return limit, true
}

// startGuestOOMKiller starts the guest OOM killer when this envd, the sandbox's init, must
// be it (guestOOMLimit).
// Each kill is also a record on sink (envdapi.OOMKill), for the host's event; sink may be nil.
func startGuestOOMKiller(logger *slog.Logger, sink *Sink) {
	if os.Getpid() != 1 {
		return
	}
	limit, ok := guestOOMLimit()
	if !ok {
		return
	}
	k := &guestKiller{limit: limit, proc: "/proc", self: os.Getpid(), logger: logger, sink: sink}
	guestKills.Store(&k.kills)
	logger.Info("guest oom killer on", telemetry.KeyMemoryLimitBytes, limit)
	go k.run(context.Background())
}

// guestKiller kills a process when the sandbox's processes hold more memory than limit.
type guestKiller struct {
	limit  uint64
	proc   string // procfs
	self   int    // envd: never a victim
	logger *slog.Logger
	sink   *Sink // the kills' records go there; nil: none
	kills  atomic.Int64
	buf    []byte
}

// run looks at the memory in use until ctx ends, more often the nearer it is to the limit,
// and kills one process at a time past it.
func (k *guestKiller) run(ctx context.Context) {
	k.buf = make([]byte, 8192)
	idle := false // nothing to kill at the last look: say so once
	for ctx.Err() == nil {
		used, err := anonBytes(k.proc+"/meminfo", k.buf)
		if err == nil && used >= k.limit {
			if v, ok := k.victim(); ok {
				idle = false
				k.kill(ctx, v, used)
				continue
			} else if !idle {
				idle = true
				k.logger.Warn("guest oom: past the memory limit with no process to kill", telemetry.KeyBytes, used, telemetry.KeyMemoryLimitBytes, k.limit)
			}
		}
		time.Sleep(pollInterval(k.limit, used))
	}
}

// pollInterval is how long the fastest allocator needs to fill what is left below limit.
func pollInterval(limit, used uint64) time.Duration {
	if used >= limit {
		return guestPollMax // nothing to kill: wait for one to come or go
	}
	d := time.Duration(float64(limit-used) / fastestAlloc * float64(time.Second))
	return min(max(d, guestPollMin), guestPollMax)
}

// candidate is a process the killer may choose.
type candidate struct {
	pid    int
	rss    uint64 // resident bytes
	points int64  // the kernel's badness: resident pages, plus oom_score_adj thousandths of the limit
	comm   string
}

// victim chooses among the sandbox's processes (all of /proc but envd) as the kernel's OOM
// killer does.
func (k *guestKiller) victim() (candidate, bool) {
	ents, err := os.ReadDir(k.proc)
	if err != nil {
		return candidate{}, false
	}
	var pids []int
	for _, e := range ents {
		if pid, err := strconv.Atoi(e.Name()); err == nil && pid != k.self {
			pids = append(pids, pid)
		}
	}
	return chooseVictim(k.proc, pids, k.limit, k.buf)
}

// chooseVictim returns the process of pids with the most points: resident pages plus
// oom_score_adj/1000 of limit's pages (so 1000, what envd gives its commands, makes any of
// them preferred over a process without it), skipping those at -1000 and those holding
// nothing (exiting, or zombies). buf is scratch space.
func chooseVictim(proc string, pids []int, limit uint64, buf []byte) (candidate, bool) {
	page := uint64(os.Getpagesize())
	total := int64(limit / page)
	var best candidate
	found := false
	for _, pid := range pids {
		dir := proc + "/" + strconv.Itoa(pid) + "/"
		statm, err := cgroup.ReadSmall(dir+"statm", buf)
		if err != nil {
			continue
		}
		f := bytes.Fields(statm)
		if len(f) < 2 {
			continue
		}
		resident, err := strconv.ParseUint(string(f[1]), 10, 64)
		if err != nil || resident == 0 {
			continue
		}
		adj := int64(0)
		if b, err := cgroup.ReadSmall(dir+"oom_score_adj", buf); err == nil {
			adj, _ = strconv.ParseInt(string(bytes.TrimSpace(b)), 10, 64)
		}
		if adj <= -1000 {
			continue
		}
		points := int64(resident) + adj*total/1000
		if !found || points > best.points {
			best = candidate{pid: pid, rss: resident * page, points: points}
			if b, err := cgroup.ReadSmall(dir+"comm", buf); err == nil {
				best.comm = string(bytes.TrimSpace(b))
			}
			found = true
		}
	}
	return best, found
}

// kill counts the kill, then SIGKILLs v, and waits (a second at most) for it to be gone, so
// that its memory is freed before the next look.
func (k *guestKiller) kill(ctx context.Context, v candidate, used uint64) {
	n := k.kills.Add(1) // first: the reaper must find the count risen when it sees the SIGKILL
	err := unix.Kill(v.pid, unix.SIGKILL)
	attrs := []any{telemetry.KeyPID, v.pid, telemetry.KeyProcessCommand, v.comm, telemetry.KeyBytes, v.rss,
		telemetry.KeyMemoryLimitBytes, k.limit, telemetry.KeyOOMKills, n}
	if err != nil {
		k.logger.Warn("guest oom kill failed", append(attrs, telemetry.KeyError, err.Error())...)
		return
	}
	k.logger.Warn("guest oom kill", attrs...)
	if k.sink != nil {
		k.sink.emit(envdapi.OOMKill{Kind: envdapi.KindOOMKill, Time: time.Now().UTC(), PID: v.pid, Comm: v.comm,
			RSSBytes: v.rss, UsedBytes: used, LimitBytes: k.limit, Kills: uint64(n)})
	}
	stat := k.proc + "/" + strconv.Itoa(v.pid) + "/stat"
	for deadline := time.Now().Add(time.Second); time.Now().Before(deadline) && ctx.Err() == nil; time.Sleep(guestPollMin) {
		b, err := cgroup.ReadSmall(stat, k.buf)
		if err != nil {
			return // reaped
		}
		if i := bytes.LastIndexByte(b, ')'); i >= 0 && i+2 < len(b) && b[i+2] == 'Z' {
			return // dead, its memory released; envd reaps it
		}
	}
}

// anonBytes reads the anonymous and tmpfs memory in use (AnonPages) from a meminfo file:
// what the sandbox's processes hold that no reclaim frees (gVisor counts tmpfs in it; its
// page cache is evicted by the sentry itself).
func anonBytes(meminfo string, buf []byte) (uint64, error) {
	b, err := cgroup.ReadSmall(meminfo, buf)
	if err != nil {
		return 0, err
	}
	const key = "AnonPages:"
	i := bytes.Index(b, []byte(key))
	if i < 0 {
		return 0, os.ErrNotExist
	}
	line := b[i+len(key):]
	if j := bytes.IndexByte(line, '\n'); j >= 0 {
		line = line[:j]
	}
	f := bytes.Fields(line)
	if len(f) == 0 {
		return 0, os.ErrNotExist
	}
	kb, err := strconv.ParseUint(string(f[0]), 10, 64)
	if err != nil {
		return 0, err
	}
	return kb << 10, nil
}
