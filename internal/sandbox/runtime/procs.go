package runtime

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
)

// Process is one process of a sandbox, as a post-mortem shows it.
type Process struct {
	PID      int    // the pid inside the sandbox
	PPID     int    // the parent's pid inside the sandbox (0 for its init)
	HostPID  int    // the pid on the host
	State    string // R, S, D, Z...
	Command  string // the command line, arguments joined by spaces
	RSSBytes uint64
}

// Processes lists the sandbox's processes from its memory cgroup, biggest memory first.
// A runsc sandbox's processes live in its sentry: they are asked of runsc (processesRunsc).
func (r *Runc) Processes(ctx context.Context, id string) ([]Process, error) {
	if r.engineOf(id) == EngineRunsc {
		return r.processesRunsc(ctx, id)
	}
	b, err := os.ReadFile(filepath.Join(cgroupRoot, "memory", r.cgroupPath(id), "cgroup.procs"))
	if err != nil {
		return nil, fmt.Errorf("%w: processes of %s: %v", ErrNotFound, id, err)
	}
	hostToNS := map[int]int{}
	var out []Process
	for _, f := range strings.Fields(string(b)) {
		hostPID, err := strconv.Atoi(f)
		if err != nil {
			continue
		}
		p, ppidHost, ok := readProcess(hostPID)
		if !ok {
			continue
		}
		hostToNS[hostPID] = p.PID
		p.PPID = ppidHost // mapped below
		out = append(out, p)
	}
	for i := range out {
		out[i].PPID = hostToNS[out[i].PPID] // 0 when the parent is outside the sandbox
	}
	sort.Slice(out, func(i, j int) bool { return out[i].RSSBytes > out[j].RSSBytes })
	return out, nil
}

// readProcess reads a host pid's state, parent, in-namespace pid, RSS and command line.
func readProcess(hostPID int) (p Process, ppidHost int, ok bool) {
	dir := filepath.Join("/proc", strconv.Itoa(hostPID))
	status, err := os.ReadFile(filepath.Join(dir, "status"))
	if err != nil {
		return p, 0, false
	}
	p.HostPID, p.PID = hostPID, hostPID
	sc := bufio.NewScanner(bytes.NewReader(status))
	for sc.Scan() {
		k, v, _ := strings.Cut(sc.Text(), ":")
		fields := strings.Fields(v)
		if len(fields) == 0 {
			continue
		}
		switch k {
		case "State":
			p.State = fields[0]
		case "PPid":
			ppidHost, _ = strconv.Atoi(fields[0])
		case "NSpid": // host pid first, the sandbox's own pid last
			p.PID, _ = strconv.Atoi(fields[len(fields)-1])
		case "VmRSS":
			kb, _ := strconv.ParseUint(fields[0], 10, 64)
			p.RSSBytes = kb << 10
		}
	}
	if cmd, err := os.ReadFile(filepath.Join(dir, "cmdline")); err == nil {
		p.Command = strings.TrimSpace(strings.ReplaceAll(string(cmd), "\x00", " "))
	}
	if p.Command == "" {
		if comm, err := os.ReadFile(filepath.Join(dir, "comm")); err == nil {
			p.Command = "[" + strings.TrimSpace(string(comm)) + "]"
		}
	}
	return p, ppidHost, true
}
