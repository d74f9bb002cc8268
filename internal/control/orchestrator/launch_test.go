package orchestrator

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/cove-dev/cove/internal/builder/template"
	"github.com/cove-dev/cove/internal/store"
	"github.com/cove-dev/cove/sdk/reason"
)

// addSizedTemplate writes a ready template called name whose sandboxes have cpus vCPUs and
// memoryMB of memory (not the server's default 2 and 512).
func (h *harness) addSizedTemplate(name string, cpus, memoryMB int) {
	h.t.Helper()
	h.addTemplate(name, "root:x:0:0:root:/root:/bin/sh\n")
	meta, _ := json.Marshal(template.Template{Name: name, CreatedAt: time.Now(), CPUCount: cpus, MemoryMB: memoryMB})
	if err := os.WriteFile(filepath.Join(h.templates.Dir(), name, "meta.json"), meta, 0o644); err != nil {
		h.t.Fatal(err)
	}
}

// checkSize fails unless sandbox id is recorded, and was started by the runtime, with cpus
// vCPUs, memoryMB of memory and diskMB of disk.
func (h *harness) checkSize(id string, cpus, memoryMB, diskMB int) {
	h.t.Helper()
	rec := h.record(id)
	if rec.CPUCount != cpus || rec.MemoryMB != memoryMB || rec.DiskSizeMB != diskMB {
		h.t.Errorf("record of %s: %d vCPUs, %d MB, %d MB of disk; want %d, %d, %d", id, rec.CPUCount, rec.MemoryMB, rec.DiskSizeMB, cpus, memoryMB, diskMB)
	}
	h.rt.mu.Lock()
	spec := h.rt.specs[id]
	h.rt.mu.Unlock()
	if spec.Limits.CPUs != float64(cpus) || spec.Limits.MemoryBytes != int64(memoryMB)<<20 || spec.Limits.DiskBytes != int64(diskMB)<<20 {
		h.t.Errorf("runtime limits of %s: %+v; want %d vCPUs, %d MB, %d MB of disk", id, spec.Limits, cpus, memoryMB, diskMB)
	}
}

func TestACopyHasItsOriginsSize(t *testing.T) {
	h := newHarness(t, withSnapshots(t, filepath.Join(t.TempDir(), "snapshots")), func(c *Config) { c.DiskSizeMB = 2048 })
	h.addSizedTemplate("big", 4, 1536)
	parent := h.create(CreateRequest{TemplateID: "big", Timeout: time.Hour})
	h.checkSize(parent.ID, 4, 1536, 2048)

	tests := []struct {
		name  string
		start func(t *testing.T) string // the copy's id
	}{
		{"a fork of a sandbox of a 4 vCPU, 1.5 GB template has 4 vCPUs and 1.5 GB, not the server's default", func(t *testing.T) string {
			res, err := h.o.Fork(h.ctx("req-fork"), h.team, parent.ID, 1, time.Minute)
			if err == nil {
				err = res[0].Err
			}
			if err != nil {
				t.Fatal(err)
			}
			return res[0].Sandbox.ID
		}},
		{"a start from a snapshot of it has its template's size", func(t *testing.T) string {
			sn, err := h.o.CreateSnapshot(h.ctx("req-snap"), h.team, parent.ID, "")
			if err != nil {
				t.Fatal(err)
			}
			sb, err := h.o.Create(h.ctx("req-create"), CreateRequest{TeamID: h.team, TemplateID: sn.ID})
			if err != nil {
				t.Fatal(err)
			}
			return sb.ID
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			id := tt.start(t)
			h.checkSize(id, 4, 1536, 2048)
			if got := h.record(id).Runtime; got != parent.Runtime {
				t.Errorf("the copy runs on %q, its origin on %q", got, parent.Runtime)
			}
		})
	}
}

func TestAShutdownDuringAnyStartKillsTheNewSandbox(t *testing.T) {
	tests := []struct {
		name string
		// start begins a start the runtime holds once it made the sandbox; it returns the
		// start's error once it ends.
		start func(h *harness) func() error
	}{
		{"a create", func(h *harness) func() error {
			errc := make(chan error, 1)
			go func() { _, err := h.o.Create(h.ctx("req-create"), CreateRequest{TeamID: h.team}); errc <- err }()
			return func() error { return <-errc }
		}},
		{"a fork's copy", func(h *harness) func() error {
			errc := make(chan error, 1)
			parent := h.heldParent()
			go func() {
				res, err := h.o.Fork(h.ctx("req-fork"), h.team, parent, 1, time.Minute)
				if err == nil {
					err = res[0].Err
				}
				errc <- err
			}()
			return func() error { return <-errc }
		}},
		{"a start from a named snapshot", func(h *harness) func() error {
			sn, err := h.o.CreateSnapshot(h.ctx("req-snap"), h.team, h.heldParent(), "warm")
			if err != nil {
				h.t.Fatal(err)
			}
			errc := make(chan error, 1)
			go func() {
				_, err := h.o.Create(h.ctx("req-create"), CreateRequest{TeamID: h.team, TemplateID: sn.ID})
				errc <- err
			}()
			return func() error { return <-errc }
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name+" the server's shutdown overtook is killed for server_shutdown, not left running unrecorded", func(t *testing.T) {
			h := newHarness(t, withSnapshots(t, filepath.Join(t.TempDir(), "snapshots")))
			gate := make(chan struct{})
			done := tt.start(h.holding(gate))
			id := <-h.rt.created
			h.o.Shutdown(h.ctx("req-stop"))
			close(gate)
			var gone *GoneError
			if err := done(); !errors.As(err, &gone) || gone.Reason != reason.KillServerShutdown {
				t.Fatalf("start during shutdown: %v, want a GoneError for server_shutdown", err)
			}
			h.checkKilled(id, reason.KillServerShutdown, SystemRequestID, "", store.StateRunning)
			if h.o.Holds(id) {
				t.Errorf("the server still holds %s", id)
			}
		})
	}
}

// holding makes the runtime hold every create from now on, once it made the sandbox, until
// gate is closed.
func (h *harness) holding(gate chan struct{}) *harness {
	h.rt.set(func(f *fakeRuntime) { f.creating = gate })
	return h
}

// heldParent creates a running sandbox while the runtime does not hold creates, and takes
// its id off the runtime's created list, so that the next id there is the start's.
func (h *harness) heldParent() string {
	h.t.Helper()
	var gate chan struct{}
	h.rt.set(func(f *fakeRuntime) { gate, f.creating = f.creating, nil })
	sb := h.create(CreateRequest{Timeout: time.Hour})
	<-h.rt.created
	h.rt.set(func(f *fakeRuntime) { f.creating = gate })
	return sb.ID
}
