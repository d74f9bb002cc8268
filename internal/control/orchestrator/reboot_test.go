package orchestrator

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/cove-dev/cove/internal/control/vault"
	"github.com/cove-dev/cove/internal/observe/events"
	"github.com/cove-dev/cove/internal/sandbox/runtime"
	"github.com/cove-dev/cove/internal/store"
	pb "github.com/cove-dev/cove/sdk/gen/process"
	"github.com/cove-dev/cove/sdk/gen/process/processconnect"
	"github.com/cove-dev/cove/sdk/reason"
)

// withKeptFiles makes the harness's checkpointing runtime also keep files (runc's
// StopKeepFiles): a stop ends the sandbox's envd and init and remembers its id, and a
// Spec.Reboot create needs it.
func withKeptFiles(c *Config) {
	withCheckpoints(c)
	c.Runtime = &fkRuntime{ckRuntime: c.Runtime.(*ckRuntime), kept: map[string]bool{}}
}

// fkRuntime is ckRuntime with FilesKeeper: the boundary the kernel's overlay would be.
type fkRuntime struct {
	*ckRuntime
	kept map[string]bool // guarded by fakeRuntime.mu
}

// keptBytes is what every fake stop keeps.
const keptBytes = 8192

func (f *fkRuntime) StopKeepFiles(ctx context.Context, id string) (runtime.KeptFiles, error) {
	sb, err := f.get(id)
	if err != nil {
		return runtime.KeptFiles{}, err
	}
	sb.shutDown(ctx, runtime.Exit{Code: -1, Signal: "killed", Checkpointed: true})
	f.mu.Lock()
	delete(f.sandboxes, id)
	f.kept[id] = true
	f.mu.Unlock()
	return runtime.KeptFiles{Bytes: keptBytes}, nil
}

func (f *fkRuntime) KeptFiles(id string) (runtime.KeptFiles, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if !f.kept[id] {
		return runtime.KeptFiles{}, fmt.Errorf("%s: %w", id, runtime.ErrNoKeptFiles)
	}
	return runtime.KeptFiles{Bytes: keptBytes}, nil
}

func (f *fkRuntime) Create(ctx context.Context, spec runtime.Spec) (*runtime.Sandbox, error) {
	if spec.Reboot {
		f.mu.Lock()
		kept := f.kept[spec.ID]
		delete(f.kept, spec.ID)
		f.mu.Unlock()
		if !kept {
			return nil, fmt.Errorf("reboot %s: %w", spec.ID, runtime.ErrNoKeptFiles)
		}
	}
	return f.ckRuntime.Create(ctx, spec)
}

func (f *fkRuntime) Destroy(ctx context.Context, id string) error {
	f.mu.Lock()
	delete(f.kept, id)
	f.mu.Unlock()
	return f.ckRuntime.Destroy(ctx, id)
}

func (h *harness) fk() *fkRuntime { return h.o.cfg.Runtime.(*fkRuntime) }

func TestAFilesystemPauseRebootsOnResume(t *testing.T) {
	if _, err := exec.LookPath("bash"); err != nil {
		t.Skip("needs bash on the host: envd runs in-process here")
	}
	v, err := vault.Open(filepath.Join(t.TempDir(), "vault"))
	if err != nil {
		t.Fatal(err)
	}
	h := newHarness(t, withKeptFiles, func(c *Config) { c.Vault = v })
	marker := filepath.Join(t.TempDir(), "started")
	h.addStartTemplate("svc", marker, false, "")
	sb := h.create(CreateRequest{TemplateID: "svc", Secure: true, EnvVars: map[string]string{"KEPT": "value-1"}})
	if err := os.Remove(marker); err != nil {
		t.Fatalf("the start command did not run at create: %v", err)
	}
	ctx := h.ctx("req-pause")
	if err := h.o.PauseWith(ctx, h.team, sb.ID, PauseOptions{Kind: reason.PauseFilesystem}); err != nil {
		t.Fatal(err)
	}
	t.Run("the pause stops the sandbox keeping its files and says so in the record and the event", func(t *testing.T) {
		rec := h.record(sb.ID)
		if rec.State != store.StatePaused || rec.PauseKind != reason.PauseFilesystem {
			t.Errorf("record state %s pause kind %q", rec.State, rec.PauseKind)
		}
		if h.running(sb.ID) {
			t.Error("its processes still run")
		}
		if _, data := h.event(sb.ID, events.SandboxPaused); data["kind"] != "filesystem" || data["snapshot_bytes"] != float64(keptBytes) {
			t.Errorf("paused event %v", data)
		}
	})
	t.Run("traffic does not resume it and the error says why", func(t *testing.T) {
		_, err := h.o.DialPort(h.ctx("req-dial"), sb.ID, 8080)
		var paused *PausedError
		if !errors.As(err, &paused) || !paused.WithoutMemory {
			t.Fatalf("dial: %v, want a PausedError without memory", err)
		}
		if h.record(sb.ID).State != store.StatePaused {
			t.Error("traffic resumed it")
		}
	})
	t.Run("it survives a restart paused", func(t *testing.T) {
		h.restart()
		if got, err := h.o.Get(ctx, h.team, sb.ID); err != nil || got.State != store.StatePaused || got.PauseKind != reason.PauseFilesystem {
			t.Fatalf("after the restart: %+v %v", got, err)
		}
	})
	t.Run("the resume reboots it: the start command runs again, with the sandbox's token and env", func(t *testing.T) {
		got, resumed, err := h.o.Connect(h.ctx("req-connect"), h.team, sb.ID, time.Minute)
		if err != nil || !resumed || got.State != store.StateRunning || got.PauseKind != "" {
			t.Fatalf("connect: %+v resumed %v err %v", got, resumed, err)
		}
		if _, err := os.Stat(marker); err != nil {
			t.Errorf("the start command did not run again: %v", err)
		}
		h.rt.mu.Lock()
		spec := h.rt.specs[sb.ID]
		h.rt.mu.Unlock()
		if !spec.Reboot {
			t.Errorf("the resume's create was not a reboot: %+v", spec)
		}
		e, err := h.o.entryFor(ctx, h.team, sb.ID)
		if err != nil {
			t.Fatal(err)
		}
		env, err := envdEnv(ctx, e.envd, got.EnvdAccessToken)
		if err != nil || env["KEPT"] != "value-1" {
			t.Errorf("envd's environment after the reboot: %v %v", env, err)
		}
		if _, data := h.event(sb.ID, events.SandboxResumed); data["kind"] != "filesystem" || data["rebooted"] != true {
			t.Errorf("resumed event %v", data)
		}
	})
	t.Run("the environment kept for the reboot is gone from the vault once it rebooted", func(t *testing.T) {
		if kept, err := v.Get(sb.ID + bootEnvSuffix); err != nil || kept != nil {
			t.Errorf("kept environment %v %v", kept, err)
		}
	})
	t.Run("the rebooted sandbox's old init exiting does not kill it, and a kill ends it", func(t *testing.T) {
		if h.record(sb.ID).State != store.StateRunning {
			t.Fatal("not running")
		}
		if err := h.o.Kill(h.ctx("req-kill"), h.team, sb.ID, reason.KillRequest, ""); err != nil {
			t.Fatal(err)
		}
		if got := h.waitKilled(sb.ID); got.KillReason != reason.KillRequest {
			t.Errorf("kill reason %s", got.KillReason)
		}
	})
}

func TestAnAutoPauseWithoutMemoryKeepsTheFiles(t *testing.T) {
	h := newHarness(t, withKeptFiles)
	sb := h.create(CreateRequest{AutoPause: true, AutoPauseKind: reason.PauseFilesystem, Timeout: time.Second})
	h.waitFor("the TTL's auto-pause", func() bool { return h.record(sb.ID).State == store.StatePaused })
	if rec := h.record(sb.ID); rec.PauseKind != reason.PauseFilesystem || rec.AutoPauseKind != reason.PauseFilesystem {
		t.Errorf("record pause kind %q auto-pause kind %q", rec.PauseKind, rec.AutoPauseKind)
	}
	t.Run("a kill while paused removes the kept files", func(t *testing.T) {
		if err := h.o.Kill(h.ctx("req-kill"), h.team, sb.ID, reason.KillRequest, ""); err != nil {
			t.Fatal(err)
		}
		h.waitKilled(sb.ID)
		if _, err := h.fk().KeptFiles(sb.ID); !errors.Is(err, runtime.ErrNoKeptFiles) {
			t.Errorf("kept files after the kill: %v", err)
		}
	})
}

func TestACommandRunningAtAFilesystemPauseEndsWithIt(t *testing.T) {
	if _, err := os.Stat("/bin/sh"); err != nil {
		t.Skip("needs /bin/sh on the host: envd runs in-process here")
	}
	h := newHarness(t, withKeptFiles)
	sb := h.create(CreateRequest{})
	c := processconnect.NewProcessClient(h.o.envdClient(sb.ID), "http://envd")
	no := false
	req := connect.NewRequest(&pb.StartRequest{Process: &pb.ProcessConfig{Cmd: "/bin/sh", Args: []string{"-c", "exec sleep 60"}}, Stdin: &no})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	stream, err := c.Start(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	var pid uint32
	for pid == 0 && stream.Receive() {
		pid = stream.Msg().GetEvent().GetStart().GetPid()
	}
	if pid == 0 {
		t.Fatalf("no start event: %v", stream.Err())
	}
	h.waitFor("the command's start is recorded", func() bool {
		_, err := h.db.GetCommand(context.Background(), sb.ID, int(pid), time.Time{})
		return err == nil
	})
	if err := h.o.PauseWith(h.ctx("req-pause"), h.team, sb.ID, PauseOptions{Kind: reason.PauseFilesystem}); err != nil {
		t.Fatal(err)
	}
	rec, err := h.db.GetCommand(context.Background(), sb.ID, int(pid), time.Time{})
	if err != nil || rec.EndedAt.IsZero() || rec.EndCause != reason.EndSandboxPaused {
		t.Errorf("record after the pause: %+v %v, want it ended with %q", rec, err, reason.EndSandboxPaused)
	}
}
