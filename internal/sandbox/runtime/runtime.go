package runtime

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"regexp"
	"sync"
	"time"
)

// Runtime creates, runs, freezes and destroys isolated sandboxes made from a template rootfs.
// Every method is safe for concurrent use; calls for one sandbox id are serialised.
type Runtime interface {
	// Create prepares the sandbox's root, network namespace and cgroup and creates its init
	// process, stopped before exec. The sandbox's stdout and stderr are returned as readers
	// that end (io.EOF) once every process inside holding them has exited.
	Create(ctx context.Context, spec Spec) (*Sandbox, error)
	// Start lets a created sandbox's init process run.
	Start(ctx context.Context, id string) error
	// Freeze stops every process of the sandbox in place (cgroup freezer); memory stays.
	Freeze(ctx context.Context, id string) error
	// Thaw resumes a frozen sandbox.
	Thaw(ctx context.Context, id string) error
	// Wait blocks until the sandbox's init process has exited, or ctx ends.
	Wait(ctx context.Context, id string) (Exit, error)
	// State reports the sandbox's lifecycle state.
	State(ctx context.Context, id string) (State, error)
	// Stats reports the sandbox's resource usage from its cgroups.
	Stats(ctx context.Context, id string) (Stats, error)
	// Dial opens a connection from inside the sandbox's network namespace, so that
	// "127.0.0.1:49983" is the sandbox's own loopback.
	Dial(ctx context.Context, id, network, address string) (net.Conn, error)
	// Destroy kills every process of the sandbox and removes its mounts, network namespace,
	// cgroups and files. Destroying a sandbox that does not exist (any more) is not an error.
	Destroy(ctx context.Context, id string) error
}

// Errors callers branch on.
var (
	// ErrNotFound: no sandbox with that id.
	ErrNotFound = errors.New("sandbox not found")
	// ErrExists: a sandbox with that id exists already.
	ErrExists = errors.New("sandbox exists")
	// ErrInvalid: the request is malformed (bad id, missing rootfs, empty command).
	ErrInvalid = errors.New("invalid sandbox spec")
)

// Spec describes one sandbox.
type Spec struct {
	// ID names the sandbox: 1 to 64 of [A-Za-z0-9_.-], starting with a letter or digit.
	// It is also the hostname.
	ID string
	// Rootfs is the template's root directory. It is never written to: the sandbox sees it
	// through an overlay whose upper layer lives in the sandbox's own directory.
	Rootfs string
	// Layers are read-only directories stacked above Rootfs in the overlay, topmost first:
	// the layers of a template built in steps. Ignored with Direct.
	Layers []string
	// Args is the init command (PID 1 in the sandbox); it should reap orphans.
	Args []string
	// Env is the init command's environment; PATH, HOME and HOSTNAME are added when missing.
	Env []string
	// Cwd is the init command's working directory; "/" when empty.
	Cwd string
	// UID and GID the init command runs as; root when zero.
	UID, GID uint32
	// Limits caps the sandbox's memory, CPU and process count.
	Limits Limits
	// Binds are host files or directories bind-mounted into the sandbox (such as the cove
	// binary at /.cove/cove, read-only).
	Binds []Bind
	// Network chooses the sandbox's network; NetworkLoopback when empty.
	Network Network
	// Netns, when set, is a pinned network namespace the sandbox joins instead of making its
	// own loopback-only one (internal/sandbox/network makes it, with a veth, and removes it).
	Netns string
	// Direct mounts Rootfs itself, writable, as the root instead of an overlay on it. Template
	// builds use it to change a rootfs in place; sandboxes never should.
	Direct bool
	// Start lets the init process run as part of Create (runc run --detach), saving a runc
	// invocation; Start must not be called for such a sandbox.
	Start bool
	// Restore starts the sandbox from a checkpoint exported with Export (a fork, or a
	// snapshot) instead of running Args: its upper dir is copied in, and its processes and
	// memory restored, running, as with Start. Args still describe the init.
	Restore string
	// Engine is the OCI runtime that isolates the sandbox; Config.DefaultEngine when empty.
	// A restore (Restore) must name the engine its checkpoint was made by.
	Engine Engine
	// Reboot starts the sandbox afresh on the files FilesKeeper.StopKeepFiles kept for its
	// id (a filesystem-only pause): its written files are there, nothing of its processes.
	Reboot bool
}

// Bind is a host path mounted into the sandbox.
type Bind struct {
	Source   string // absolute host path
	Target   string // absolute path inside the sandbox
	ReadOnly bool
}

// Limits caps a sandbox's resources; a zero field means no limit.
type Limits struct {
	MemoryBytes int64   // memory.limit_in_bytes; the sandbox is OOM-killed above it
	CPUs        float64 // CPU time as a number of cores (cfs quota over a 100 ms period)
	PIDs        int64   // pids.max
	// NoFile is RLIMIT_NOFILE, soft and hard, of every process in the sandbox. With PIDs it
	// bounds the files a sandbox can hold open (NoFile × PIDs). Runc's Config.NoFile when 0.
	NoFile uint64
	// DiskBytes bounds what the sandbox writes to its root: the overlay's upper layer is an
	// ext4 filesystem of this size, so a write past it gets ENOSPC (not with Direct).
	DiskBytes int64
}

// Network is how a sandbox reaches the network.
type Network string

const (
	// NetworkLoopback gives the sandbox a named network namespace of its own with only a
	// loopback interface, reached from the host through Dial.
	NetworkLoopback Network = "loopback"
	// NetworkHost shares the host's network namespace (template builds that download).
	NetworkHost Network = "host"
)

func (n Network) String() string {
	if n == "" {
		return string(NetworkLoopback)
	}
	return string(n)
}

// Sandbox is a created sandbox and the read ends of its init's stdout and stderr.
// The caller must drain or close both readers; a full pipe blocks the writer inside.
type Sandbox struct {
	ID     string
	Pid    int // host pid of the sandbox's init process
	Stdout io.ReadCloser
	Stderr io.ReadCloser
}

// State is a sandbox's lifecycle state, as the OCI runtime reports it.
type State string

// The sandbox states.
const (
	StateUnknown State = "unknown"
	StateCreated State = "created"
	StateRunning State = "running"
	StatePaused  State = "paused"
	StateStopped State = "stopped"
)

func (s State) String() string {
	if s == "" {
		return string(StateUnknown)
	}
	return string(s)
}

// Exit is how a sandbox's init process ended.
type Exit struct {
	Code      int    // exit status, or -1 when killed by a signal
	Signal    string // the signal's name when killed by one ("killed")
	OOMKilled bool   // the kernel's OOM killer killed a process of this sandbox
	At        time.Time
	// Checkpointed: a checkpoint (Checkpointer) or a stop that keeps the files (FilesKeeper)
	// stopped the init; the sandbox lives on disk.
	Checkpointed bool
}

// Stats is a sandbox's resource usage, read from its cgroup v1 files.
type Stats struct {
	MemoryUsage    uint64        // memory.usage_in_bytes
	MemoryMaxUsage uint64        // memory.max_usage_in_bytes
	MemoryLimit    uint64        // memory.limit_in_bytes
	MemoryRSS      uint64        // memory.stat total_rss
	MemoryCache    uint64        // memory.stat total_cache
	MemoryFailCnt  uint64        // memory.failcnt: times the limit was hit
	OOMKills       uint64        // memory.oom_control oom_kill: processes the OOM killer killed
	UnderOOM       bool          // memory.oom_control under_oom
	CPU            time.Duration // cpuacct.usage
	PIDs           uint64        // pids.current
	PIDsLimit      uint64        // pids.max; 0 when unlimited
}

var validID = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$`) }) // compiled on first use, not at every start of the binary

// ValidID reports whether id can name a sandbox.
func ValidID(id string) error {
	if !validID().MatchString(id) {
		return fmt.Errorf("%w: id %q must be 1-64 of [A-Za-z0-9_.-] starting with a letter or digit", ErrInvalid, id)
	}
	return nil
}
