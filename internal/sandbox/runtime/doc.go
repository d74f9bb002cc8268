// Package runtime runs Cove's sandboxes: isolated environments made from a read-only template
// rootfs, behind one Runtime interface (create, start, freeze/thaw, wait, stats, dial, destroy).
//
// The one idea: the isolation itself is the industry's hardened one, delegated to an OCI runtime
// (runc, through its CLI and a config.json, the way containerd drives it), while Cove owns
// everything around it, so that every sandbox is a handful of named host objects that Destroy
// can always find and remove from the id alone:
//
//   - <data>/<id>/rootfs: an overlay mount, lower = template rootfs, upper/work beside it;
//   - /run/cove/netns/<id>: a pinned network namespace with only loopback, which the host
//     enters with Dial (a locked thread that setns's, opens the socket, and comes back);
//   - /sys/fs/cgroup/<controller>/cove/<id>: an absolute cgroup v1 path with memory, cpu and
//     pids limits, the freezer, and the counters Stats reads (including OOM kills);
//   - the init's stdout/stderr: pipes whose read ends the caller gets; envd holds a read end
//     too, so they outlive the server, and a new one opens them again (see Adopter).
//
// The driver makes its process a child subreaper, so each sandbox's init is reaped by Cove:
// exit status and OOM kill are known, and no zombie is left. A sandbox outlives the server:
// its init runs in its own session and cgroups, and a restarted server adopts it (Adopt). Detect reports what a machine
// offers (root, runc, cgroup v1 controllers, overlayfs) and why sandboxes cannot run when not.
//
// It must not import anything above it: template, store, events, the orchestrator or the edges
// (internal/layering checks).
package runtime
